package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/controller"
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
	// NodesGeneration, when set, numbers the versions of the node list as the policies see it
	// (names, labels, taints): it changes whenever one of those changes, and not otherwise. The
	// decision cache then keys validations by it instead of listing every node, so a hit costs
	// the same at 5 nodes as at 5,000, and node status writes (heartbeats) leave cached
	// decisions in place. ok is false while it cannot vouch for the list (then nodes are listed).
	NodesGeneration func() (gen uint64, ok bool)
}

// Handlers adapts the pure functions of this package to admission requests.
type Handlers struct {
	Engine           *policy.Engine
	ExemptNamespaces []string
	FailureMode      FailureMode
	Facts            Facts
	Log              logr.Logger
	// NoDecisionCache turns off the decision cache (see decisionCache): every request is decoded
	// and evaluated. For measurements; the cache is on by default.
	NoDecisionCache bool
	// NoNodeFactsMemo turns off the memo of node facts (see nodeFactsMemo): every validation
	// evaluated lists and matches the nodes. For measurements; the memo is on by default.
	NoNodeFactsMemo bool

	cache     decisionCache
	nodeFacts nodeFactsMemo
}

func (h *Handlers) exempt(namespace string) bool {
	return slices.Contains(h.ExemptNamespaces, namespace)
}

var daemonSetKind = struct{ group, version, kind string }{"apps", "v1", "DaemonSet"}

func checkDaemonSetRequest(req admission.Request) error {
	k := req.Kind
	if k.Group != daemonSetKind.group || k.Version != daemonSetKind.version || k.Kind != daemonSetKind.kind {
		return fmt.Errorf("this endpoint admits apps/v1 DaemonSet, got %s/%s %s", k.Group, k.Version, k.Kind)
	}
	if len(req.Object.Raw) == 0 {
		return fmt.Errorf("request has no object")
	}
	return nil
}

// ignored tells objects labelled daemonguard.io/ignore=true (the objectSelector normally keeps
// them away; this guards configurations without it).
func ignored(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	return labels[IgnoreLabel] == "true"
}

// clusterFacts is what the handlers read of the live cluster for one request.
type clusterFacts struct {
	labels   map[string]string // of the namespace; {} when unknown
	nodes    []*corev1.Node
	nodesErr error // nodes could not be read (or were not asked for)
	// nodesGen is the node list's generation (Facts.NodesGeneration) when haveGen; the nodes
	// themselves are then read only when a request is evaluated (loadNodes).
	nodesGen uint64
	haveGen  bool
}

// gather reads the namespace labels and, when needNodes (the inject policy never reads nodes),
// the nodes. Facts that cannot be read are left out rather than guessed, which turns off the
// checks that need them.
func (h *Handlers) gather(ctx context.Context, req admission.Request, needNodes bool) clusterFacts {
	f := clusterFacts{labels: map[string]string{}, nodesErr: errNodesNotRead}
	if h.Facts.NamespaceLabels != nil {
		labels, err := h.Facts.NamespaceLabels(ctx, req.Namespace)
		if err != nil {
			h.Log.V(1).Info("Namespace labels unavailable", "namespace", req.Namespace, "err", err)
		} else if labels != nil {
			f.labels = labels
		}
	}
	if needNodes && h.Facts.Nodes != nil {
		if h.Facts.NodesGeneration != nil {
			// Read before the nodes, so a list read later is at least as new as the key says.
			f.nodesGen, f.haveGen = h.Facts.NodesGeneration()
		}
		if !f.haveGen {
			h.loadNodes(ctx, &f)
		}
	}
	return f
}

// loadNodes reads the nodes into f unless they are read already.
func (h *Handlers) loadNodes(ctx context.Context, f *clusterFacts) {
	if h.Facts.Nodes == nil || !errors.Is(f.nodesErr, errNodesNotRead) {
		return
	}
	f.nodes, f.nodesErr = h.Facts.Nodes(ctx)
	if f.nodesErr != nil {
		h.Log.V(1).Info("Nodes unavailable; node-relative checks skipped", "err", f.nodesErr)
	}
}

var errNodesNotRead = errors.New("nodes not read")

// cacheKey returns the decision cache key of a request, or nil when the request must not be
// cached: the set is not deterministic, the cache is off, or the node facts cannot be vouched for.
func (h *Handlers) cacheKey(set *policy.Set, webhook string, req admission.Request, f clusterFacts, needNodes bool) *cacheKey {
	if h.NoDecisionCache || !set.Deterministic() {
		return nil
	}
	key := &cacheKey{
		webhook: webhook, operation: string(req.Operation), namespace: req.Namespace,
		labels: labelsKey(f.labels), object: req.Object.Raw, oldObject: req.OldObject.Raw,
	}
	if needNodes && f.haveGen {
		key.nodes = strconv.AppendUint([]byte("G"), f.nodesGen, 10) // differs from every listed key (N...)
	} else if needNodes && f.nodesErr == nil {
		var ok bool
		if key.nodes, ok = nodesKey(f.nodes); !ok {
			return nil
		}
	} else if needNodes && !errors.Is(f.nodesErr, errNodesNotRead) {
		key.nodes = []byte("unreadable") // differs from every readable list (those start with N)
	}
	return key
}

// lookup returns the request's decision cache key (nil: not cacheable) and, on a hit, the value
// cached under it, counting hits and misses.
func (h *Handlers) lookup(set *policy.Set, webhook string, req admission.Request, f clusterFacts, needNodes bool) (*cacheKey, any, bool) {
	key := h.cacheKey(set, webhook, req, f, needNodes)
	if key == nil {
		return nil, nil, false
	}
	if v, ok := h.cache.get(set, key); ok {
		decisionCacheTotal.WithLabelValues(webhook, "hit").Inc()
		return key, v, true
	}
	decisionCacheTotal.WithLabelValues(webhook, "miss").Inc()
	return key, nil, false
}

// checkDaemonSet answers malformed (400) and exempt-namespace requests early.
func (h *Handlers) checkDaemonSet(req admission.Request) *admission.Response {
	if err := checkDaemonSetRequest(req); err != nil {
		r := admission.Errored(http.StatusBadRequest, err)
		return &r
	}
	if h.exempt(req.Namespace) {
		r := admission.Allowed("namespace " + req.Namespace + " is exempt")
		return &r
	}
	return nil
}

// daemonSetInput decodes the object once and builds the policy input, without cluster facts (see
// templateFacts), or returns the response that ends the request early: malformed (400), or
// opted out by label, or a status-only update.
func (h *Handlers) daemonSetInput(req admission.Request, f clusterFacts) (*policy.Input, *admission.Response) {
	end := func(r admission.Response) (*policy.Input, *admission.Response) { return nil, &r }
	obj, err := decodeRequestObject(req.Object.Raw)
	if err != nil {
		return end(admission.Errored(http.StatusBadRequest, err))
	}
	if ignored(obj) {
		return end(admission.Allowed("labelled " + IgnoreLabel + "=true"))
	}
	if req.Operation == admissionv1.Update && onlyStatusAnnotationsChanged(req.OldObject.Raw, req.Object.Raw) {
		// The rollout controller reporting progress: neither a new injection (which would start a
		// new revision behind the user's back) nor a policy verdict is due.
		return end(admission.Allowed("only daemonguard status annotations changed"))
	}
	in := &policy.Input{Operation: policy.Operation(req.Operation), Object: obj, Namespace: policy.Namespace{Name: req.Namespace, Labels: f.labels}}
	if len(req.OldObject.Raw) > 0 {
		// The review was valid JSON (Serve decoded it), so an old object that starts
		// as an object is one; decoding it is left to the policy engine, which needs it only for
		// policies OPA evaluates.
		if first := bytes.TrimLeft(req.OldObject.Raw, " \t\r\n"); len(first) == 0 || first[0] != '{' {
			return end(admission.Errored(http.StatusBadRequest, errors.New("old object: decode object: not a JSON object")))
		}
		in.OldObjectJSON = req.OldObject.Raw
	}
	return in, nil
}

// templatePodSpec converts the parts of spec.template.spec that decide node eligibility (node
// selector, affinity, tolerations) to a typed PodSpec, the rest left out: converting a whole pod
// spec was a large part of a validation.
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

// injection is the mutating webhook's cached outcome of an evaluation.
type injection struct {
	decision policy.InjectDecision
	patch    []byte // the JSON patch, encoded once; empty when nothing is injected
}

func (m DaemonSetMutator) mutate(ctx context.Context, req admission.Request) admission.Response {
	if early := m.checkDaemonSet(req); early != nil {
		return *early
	}
	set := m.Engine.Set()
	f := m.gather(ctx, req, false)
	key, cached, hit := m.lookup(set, "mutate-daemonset", req, f, false)
	if hit {
		return injectionResponse(cached.(*injection))
	}
	in, early := m.daemonSetInput(req, f)
	if early != nil {
		return *early
	}
	decision, err := set.Inject(ctx, in)
	if err != nil {
		return m.evaluationFailed(req, err)
	}
	patch, err := daemonSetPatch(in.Object, decision)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	out := &injection{decision: decision}
	if len(patch) > 0 {
		if out.patch, err = encodePatch(patch); err != nil {
			return admission.Errored(http.StatusInternalServerError, err)
		}
	}
	if key != nil {
		m.cache.put(set, key, out)
	}
	return injectionResponse(out)
}

func injectionResponse(x *injection) admission.Response {
	if len(x.patch) == 0 {
		reason := x.decision.Reason
		if x.decision.Inject {
			reason = "template already has everything the inject policy asks for"
		}
		return admission.Allowed(reason)
	}
	return withPatch(admission.Allowed(""), x.patch)
}

// DaemonSetValidator enforces the validation policies on DaemonSets.
type DaemonSetValidator struct{ *Handlers }

// Handle implements admission.Handler.
func (v DaemonSetValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return v.observe("validate-daemonset", v.validate(ctx, req))
}

func (v DaemonSetValidator) validate(ctx context.Context, req admission.Request) admission.Response {
	if early := v.checkDaemonSet(req); early != nil {
		return *early
	}
	set := v.Engine.Set()
	f := v.gather(ctx, req, true)
	key, cached, hit := v.lookup(set, "validate-daemonset", req, f, true)
	if hit {
		return v.verdict(req, cached.([]policy.Violation))
	}
	in, early := v.daemonSetInput(req, f)
	if early != nil {
		return *early
	}
	in.Cluster = v.templateFacts(ctx, req.Object.Raw, in.Object, &f)
	if f.haveGen && f.nodesErr != nil && !errors.Is(f.nodesErr, errNodesNotRead) {
		// Keyed by a generation whose nodes could not be read: a decision made without them
		// must not answer the next request of that generation.
		key = nil
	}
	violations, err := set.Validate(ctx, in)
	if err != nil {
		return v.evaluationFailed(req, err)
	}
	if key != nil {
		v.cache.put(set, key, violations)
	}
	return v.verdict(req, violations)
}

// verdict turns violations into the response, counting them and logging dry runs.
func (v DaemonSetValidator) verdict(req admission.Request, violations []policy.Violation) admission.Response {
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

// PodPinner pins DaemonSet pods to their node by node affinity (Pods, CREATE only). Its requests
// must come from Serve (or admission.Webhook), which has checked that the object is valid JSON.
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
	// Serve decoded the AdmissionReview, object included, so the object is valid JSON.
	res, err := podPinPatch(req.Object.Raw, true)
	if err != nil {
		return admission.Errored(http.StatusBadRequest, err)
	}
	if len(res.Patch) == 0 {
		return admission.Allowed(res.Reason)
	}
	patch, err := encodePatch(res.Patch)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return withPatch(admission.Allowed(res.Reason), patch)
}

func (h *Handlers) observe(webhook string, resp admission.Response) admission.Response {
	result := "allowed"
	switch {
	case resp.Result != nil && resp.Result.Code >= 400 && resp.Result.Code != http.StatusForbidden:
		result = "error"
	case !resp.Allowed:
		result = "denied"
	case len(resp.Patch) > 0 || len(resp.Patches) > 0:
		result = "patched"
	}
	admissionTotal.WithLabelValues(webhook, result).Inc()
	return resp
}

// onlyStatusAnnotationsChanged tells an update that differs from the stored object only in the
// rollout controller's status.daemonguard.io/ annotations and in fields the API server maintains.
func onlyStatusAnnotationsChanged(oldRaw, newRaw []byte) bool {
	if len(oldRaw) == 0 || (!bytes.Contains(newRaw, []byte(controller.StatusPrefix)) && !bytes.Contains(oldRaw, []byte(controller.StatusPrefix))) {
		return false // cheap exit for the common case: no status annotation at all
	}
	oldObj, err1 := decodeObject(oldRaw)
	newObj, err2 := decodeObject(newRaw)
	if err1 != nil || err2 != nil {
		return false
	}
	changed := false
	for _, obj := range []map[string]any{oldObj, newObj} {
		delete(obj, "status")
		meta, _ := obj["metadata"].(map[string]any)
		for _, f := range []string{"managedFields", "resourceVersion", "generation"} {
			delete(meta, f)
		}
		if ann, ok := meta["annotations"].(map[string]any); ok {
			for k := range ann {
				if strings.HasPrefix(k, controller.StatusPrefix) {
					delete(ann, k)
					changed = true
				}
			}
			if len(ann) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	return changed && reflect.DeepEqual(oldObj, newObj)
}
