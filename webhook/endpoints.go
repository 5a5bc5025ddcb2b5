package webhook

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// Webhook paths served by daemonguard.
const (
	MutateDaemonSetPath   = "/mutate-apps-v1-daemonset"
	ValidateDaemonSetPath = "/validate-apps-v1-daemonset"
	MutatePodPath         = "/mutate-v1-pod"
)

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
