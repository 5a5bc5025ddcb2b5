package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/controller"
	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// Webhook paths served by daemonguard.
const (
	MutateDaemonSetPath   = "/mutate-apps-v1-daemonset"
	ValidateDaemonSetPath = "/validate-apps-v1-daemonset"
	MutatePodPath         = "/mutate-v1-pod"
)

// IgnoreLabel opts a DaemonSet out of every daemonguard webhook (also used as objectSelector).
const IgnoreLabel = "daemonguard.io/ignore"

// FailureMode says what happens when policies cannot be evaluated. Neither mode admits silently.
type FailureMode string

// Failure modes.
const (
	// FailClosed rejects the request, naming the evaluation error.
	FailClosed FailureMode = "deny"
	// FailOpenWithWarning admits the request with an admission warning, a log line and a metric.
	FailOpenWithWarning FailureMode = "warn"
)

// Facts supplies what the webhook knows of the live cluster. Nil functions mean "unknown".
type Facts struct {
	NamespaceLabels func(ctx context.Context, name string) (map[string]string, error)
	Nodes           func(ctx context.Context) ([]*corev1.Node, error)
}

// Handlers adapts the pure functions of this package to admission requests.
type Handlers struct {
	Engine           *policy.Engine
	ExemptNamespaces []string
	FailureMode      FailureMode
	Facts            Facts
	Log              logr.Logger
}

// Endpoints returns the HTTP handlers of the three webhooks by path, each a controller-runtime
// admission.Webhook: it decodes reviews, answers malformed ones, recovers panics and encodes
// patches, so that the handlers here only decide. Bodies over the size limit are answered
// before it (refuseOversized).
func (h *Handlers) Endpoints() map[string]http.Handler {
	return map[string]http.Handler{
		MutateDaemonSetPath:   refuseOversized(&admission.Webhook{Handler: DaemonSetMutator{h}}),
		ValidateDaemonSetPath: refuseOversized(&admission.Webhook{Handler: DaemonSetValidator{h}}),
		MutatePodPath:         refuseOversized(&admission.Webhook{Handler: PodPinner{h}}),
	}
}

func (h *Handlers) exempt(namespace string) bool {
	return slices.Contains(h.ExemptNamespaces, namespace)
}

// ignored tells objects labelled daemonguard.io/ignore=true (the objectSelector normally keeps
// them away; this guards configurations without it).
func ignored(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	return labels[IgnoreLabel] == "true"
}

// daemonSetRequest is a DaemonSet admission request with what the webhook read of the cluster for
// it, or the response that ends it early.
type daemonSetRequest struct {
	in    *policy.Input
	nodes []*corev1.Node // nil when unknown or not asked for
	end   *admission.Response
}

// gatherDaemonSet decodes a DaemonSet request and reads the facts its evaluation needs, in one
// step: the namespace's labels and, with needNodes (the inject policy never reads nodes), the
// nodes. It ends the request early when it is malformed (400), exempt, opted out by label, or
// the rollout controller's status-only update. Facts that cannot be read are left out rather than
// guessed, which turns off the checks that need them.
func (h *Handlers) gatherDaemonSet(ctx context.Context, req admission.Request, needNodes bool) daemonSetRequest {
	end := func(r admission.Response) daemonSetRequest { return daemonSetRequest{end: &r} }
	if k := req.Kind; k.Group != "apps" || k.Version != "v1" || k.Kind != "DaemonSet" {
		return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint admits apps/v1 DaemonSet, got %s/%s %s", k.Group, k.Version, k.Kind)))
	}
	if len(req.Object.Raw) == 0 {
		return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("request has no object")))
	}
	if h.exempt(req.Namespace) {
		return end(admission.Allowed("namespace " + req.Namespace + " is exempt"))
	}
	obj, err := decodeObject(req.Object.Raw)
	if err != nil {
		return end(admission.Errored(http.StatusBadRequest, err))
	}
	if ignored(obj) {
		return end(admission.Allowed("labelled " + IgnoreLabel + "=true"))
	}
	in := &policy.Input{Operation: policy.Operation(req.Operation), Object: obj, Namespace: policy.Namespace{Name: req.Namespace, Labels: map[string]string{}}}
	if len(req.OldObject.Raw) > 0 {
		if in.OldObject, err = decodeObject(req.OldObject.Raw); err != nil {
			return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("old object: %w", err)))
		}
		if req.Operation == admissionv1.Update && onlyStatusAnnotationsChanged(in.OldObject, obj) {
			// The rollout controller reporting progress: neither a new injection (which would
			// start a new revision behind the user's back) nor a policy verdict is due.
			return end(admission.Allowed("only daemonguard status annotations changed"))
		}
	}
	if h.Facts.NamespaceLabels != nil {
		labels, err := h.Facts.NamespaceLabels(ctx, req.Namespace)
		if err != nil {
			h.Log.V(1).Info("Namespace labels unavailable", "namespace", req.Namespace, "err", err)
		} else if labels != nil {
			in.Namespace.Labels = labels
		}
	}
	r := daemonSetRequest{in: in}
	if needNodes && h.Facts.Nodes != nil {
		if r.nodes, err = h.Facts.Nodes(ctx); err != nil {
			h.Log.V(1).Info("Nodes unavailable; node-relative checks skipped", "err", err)
			r.nodes = nil
		}
	}
	return r
}

// templateFacts returns how many nodes there are and how many the DaemonSet's template targets;
// nil when the nodes are unknown or the template is malformed, which turns off the checks that
// need them.
func templateFacts(obj map[string]any, nodeList []*corev1.Node) *policy.ClusterFacts {
	if nodeList == nil {
		return nil
	}
	podSpec, ok := templatePodSpec(obj)
	if !ok {
		return nil
	}
	return &policy.ClusterFacts{Nodes: len(nodeList), MatchingNodes: nodes.Count(podSpec, nodeList)}
}

// templatePodSpec converts the parts of spec.template.spec that decide node eligibility (node
// selector, affinity, tolerations) to a typed PodSpec; nothing else of the pod spec is needed.
func templatePodSpec(obj map[string]any) (*corev1.PodSpec, bool) {
	spec, _ := obj["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	podSpec, isObject := template["spec"].(map[string]any)
	if !isObject && template["spec"] != nil {
		return nil, false
	}
	scheduling := make(map[string]any, 3)
	for _, k := range []string{"nodeSelector", "affinity", "tolerations"} {
		if v, ok := podSpec[k]; ok {
			scheduling[k] = v
		}
	}
	raw, err := json.Marshal(scheduling)
	if err != nil {
		return nil, false
	}
	var typed corev1.PodSpec
	if json.Unmarshal(raw, &typed) != nil {
		return nil, false
	}
	return &typed, true
}

// evaluationFailed applies the failure mode to an error from the policy engine.
func (h *Handlers) evaluationFailed(req admission.Request, err error) admission.Response {
	evaluationErrors.Inc()
	h.Log.Error(err, "Policy evaluation failed", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "failureMode", h.FailureMode)
	if h.FailureMode == FailOpenWithWarning {
		return admission.Allowed("").WithWarnings("daemonguard could not evaluate its policies and admitted this object unchecked: " + err.Error())
	}
	return admission.Denied("daemonguard could not evaluate its policies (failure mode deny): " + err.Error())
}

// DaemonSetMutator injects what the inject policy decides into DaemonSet pod templates.
type DaemonSetMutator struct{ *Handlers }

// Handle implements admission.Handler.
func (m DaemonSetMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return m.observe("mutate-daemonset", m.mutate(ctx, req))
}

func (m DaemonSetMutator) mutate(ctx context.Context, req admission.Request) admission.Response {
	r := m.gatherDaemonSet(ctx, req, false)
	if r.end != nil {
		return *r.end
	}
	decision, err := m.Engine.Set().Inject(ctx, r.in)
	if err != nil {
		return m.evaluationFailed(req, err)
	}
	patch, err := daemonSetPatch(r.in.Object, decision)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(patch) > 0 {
		return admission.Patched("", patch...)
	}
	if decision.Inject {
		return admission.Allowed("template already has everything the inject policy asks for")
	}
	return admission.Allowed(decision.Reason)
}

// DaemonSetValidator enforces the validation policies on DaemonSets.
type DaemonSetValidator struct{ *Handlers }

// Handle implements admission.Handler.
func (v DaemonSetValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return v.observe("validate-daemonset", v.validate(ctx, req))
}

func (v DaemonSetValidator) validate(ctx context.Context, req admission.Request) admission.Response {
	r := v.gatherDaemonSet(ctx, req, true)
	if r.end != nil {
		return *r.end
	}
	r.in.Cluster = templateFacts(r.in.Object, r.nodes)
	violations, err := v.Engine.Set().Validate(ctx, r.in)
	if err != nil {
		return v.evaluationFailed(req, err)
	}
	verdict := Decide(violations)
	for _, x := range violations {
		violationsTotal.WithLabelValues(x.Policy, string(x.Action)).Inc()
	}
	for _, d := range verdict.DryRuns {
		v.Log.Info("Dry-run policy violated", "policy", d.Policy, "field", d.Field, "message", d.Message, "namespace", req.Namespace, "name", req.Name)
	}
	if !verdict.Allowed {
		return admission.Denied(verdict.DenialMessage()).WithWarnings(verdict.WarningMessages()...)
	}
	return admission.Allowed("").WithWarnings(verdict.WarningMessages()...)
}

// PodPinner pins DaemonSet pods to their node by node affinity (Pods, CREATE only).
type PodPinner struct{ *Handlers }

// Handle implements admission.Handler.
func (p PodPinner) Handle(_ context.Context, req admission.Request) admission.Response {
	return p.observe("mutate-pod", p.pin(req))
}

func (p PodPinner) pin(req admission.Request) admission.Response {
	if req.Kind.Group != "" || req.Kind.Version != "v1" || req.Kind.Kind != "Pod" {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint admits v1 Pod, got %s/%s %s", req.Kind.Group, req.Kind.Version, req.Kind.Kind))
	}
	if req.Operation != admissionv1.Create {
		return admission.Allowed("only CREATE is pinned")
	}
	if p.exempt(req.Namespace) {
		return admission.Allowed("namespace " + req.Namespace + " is exempt")
	}
	res, err := PodPinPatch(req.Object.Raw)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(res.Patch) == 0 {
		return admission.Allowed(res.Reason)
	}
	return admission.Patched(res.Reason, res.Patch...)
}

func (h *Handlers) observe(webhook string, resp admission.Response) admission.Response {
	result := "allowed"
	switch {
	case resp.Result != nil && resp.Result.Code >= 400 && resp.Result.Code != http.StatusForbidden:
		result = "error"
	case !resp.Allowed:
		result = "denied"
	case len(resp.Patches) > 0:
		result = "patched"
	}
	admissionTotal.WithLabelValues(webhook, result).Inc()
	return resp
}

// onlyStatusAnnotationsChanged tells an update that differs from the stored object only in the
// rollout controller's status.daemonguard.io/ annotations and in fields the API server maintains.
// Neither object is modified.
func onlyStatusAnnotationsChanged(oldObj, newObj map[string]any) bool {
	changed := false
	strip := func(obj map[string]any) map[string]any {
		out := make(map[string]any, len(obj))
		for k, v := range obj {
			if k != "status" && k != "metadata" {
				out[k] = v
			}
		}
		meta, _ := obj["metadata"].(map[string]any)
		metaOut := make(map[string]any, len(meta))
		for k, v := range meta {
			switch k {
			case "managedFields", "resourceVersion", "generation":
			case "annotations":
				ann, ok := v.(map[string]any)
				if !ok {
					metaOut[k] = v
					continue
				}
				kept := make(map[string]any, len(ann))
				for a, x := range ann {
					if strings.HasPrefix(a, controller.StatusPrefix) {
						changed = true
						continue
					}
					kept[a] = x
				}
				if len(kept) > 0 {
					metaOut[k] = kept
				}
			default:
				metaOut[k] = v
			}
		}
		out["metadata"] = metaOut
		return out
	}
	same := reflect.DeepEqual(strip(oldObj), strip(newObj))
	return changed && same
}
