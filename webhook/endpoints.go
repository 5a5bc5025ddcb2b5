package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
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
		MutateDaemonSetPath:   answerThroughShutdown(refuseOversized(&admission.Webhook{Handler: DaemonSetMutator{h}})),
		ValidateDaemonSetPath: answerThroughShutdown(refuseOversized(&admission.Webhook{Handler: DaemonSetValidator{h}})),
		MutatePodPath:         answerThroughShutdown(refuseOversized(&admission.Webhook{Handler: PodPinner{h}})),
	}
}

// DaemonSetMutator injects what the inject policy decides into DaemonSet pod templates.
type DaemonSetMutator struct{ *Handlers }

// Handle implements admission.Handler.
func (m DaemonSetMutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return m.observe("mutate-daemonset", m.mutate(ctx, req))
}

func (m DaemonSetMutator) mutate(ctx context.Context, req admission.Request) admission.Response {
	if resp, ok := daemonSetOnly(req); !ok {
		return resp
	}
	r := m.admission().Mutate(ctx, m.Engine.Set(), reviewOf(req))
	if resp, ended := m.ended(req, r); ended {
		return resp
	}
	if len(r.Patch) > 0 {
		return admission.Patched("", r.Patch...)
	}
	if r.Inject.Inject {
		return admission.Allowed("template already has everything the inject policy asks for")
	}
	return admission.Allowed(r.Inject.Reason)
}

// DaemonSetValidator enforces the validation policies on DaemonSets.
type DaemonSetValidator struct{ *Handlers }

// Handle implements admission.Handler.
func (v DaemonSetValidator) Handle(ctx context.Context, req admission.Request) admission.Response {
	return v.observe("validate-daemonset", v.validate(ctx, req))
}

func (v DaemonSetValidator) validate(ctx context.Context, req admission.Request) admission.Response {
	if resp, ok := daemonSetOnly(req); !ok {
		return resp
	}
	r := v.admission().Validate(ctx, v.Engine.Set(), reviewOf(req))
	if resp, ended := v.ended(req, r); ended {
		return resp
	}
	for _, x := range r.Violations {
		violationsTotal.WithLabelValues(x.Policy, string(x.Action)).Inc()
	}
	for _, d := range r.Verdict.DryRuns {
		v.Log.Info("Dry-run policy violated", "policy", d.Policy, "field", d.Field, "message", d.Message, "namespace", req.Namespace, "name", req.Name)
	}
	if !r.Verdict.Allowed {
		return admission.Denied(r.Verdict.DenialMessage()).WithWarnings(r.Verdict.WarningMessages()...)
	}
	return admission.Allowed("").WithWarnings(r.Verdict.WarningMessages()...)
}

// admission is the core the handlers adapt.
func (h *Handlers) admission() *Admission {
	return &Admission{Exempt: h.ExemptNamespaces, Facts: h.Facts, Log: h.Log}
}

// reviewOf is the core's view of an admission request.
func reviewOf(req admission.Request) Review {
	return Review{Operation: policy.Operation(req.Operation), Namespace: req.Namespace, Object: req.Object.Raw, OldObject: req.OldObject.Raw}
}

// daemonSetOnly answers a request for anything but an apps/v1 DaemonSet with a bad request.
func daemonSetOnly(req admission.Request) (admission.Response, bool) {
	if k := req.Kind; k.Group != "apps" || k.Version != "v1" || k.Kind != "DaemonSet" {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint admits apps/v1 DaemonSet, got %s/%s %s", k.Group, k.Version, k.Kind)), false
	}
	return admission.Response{}, true
}

// ended answers a review the core ended early: skipped, malformed, or not evaluated (by the
// failure mode).
func (h *Handlers) ended(req admission.Request, r Result) (admission.Response, bool) {
	switch {
	case r.Malformed != nil:
		return admission.Errored(http.StatusBadRequest, r.Malformed), true
	case r.Skip != "":
		return admission.Allowed(r.Skip), true
	case r.Failed != nil:
		return h.evaluationFailed(req, r.Failed), true
	}
	return admission.Response{}, false
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
	if slices.Contains(p.ExemptNamespaces, req.Namespace) {
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

// FailureMode says what happens when policies cannot be evaluated. Neither mode admits silently.
type FailureMode string

// Failure modes.
const (
	// FailClosed rejects the request, naming the evaluation error.
	FailClosed FailureMode = "deny"
	// FailOpenWithWarning admits the request with an admission warning, a log line and a metric.
	FailOpenWithWarning FailureMode = "warn"
)

// evaluationFailed applies the failure mode to an error from the policy engine.
func (h *Handlers) evaluationFailed(req admission.Request, err error) admission.Response {
	evaluationErrors.Inc()
	h.Log.Error(err, "Policy evaluation failed", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "failureMode", h.FailureMode)
	if h.FailureMode == FailOpenWithWarning {
		return admission.Allowed("").WithWarnings("daemonguard could not evaluate its policies and admitted this object unchecked: " + err.Error())
	}
	return admission.Denied("daemonguard could not evaluate its policies (failure mode deny): " + err.Error())
}

var (
	admissionTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daemonguard_admission_requests_total",
		Help: "Admission requests handled, by webhook and result (allowed, patched, denied, error).",
	}, []string{"webhook", "result"})
	violationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daemonguard_policy_violations_total",
		Help: "Policy violations found at admission, by policy and enforcement action.",
	}, []string{"policy", "action"})
	evaluationErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "daemonguard_policy_evaluation_errors_total",
		Help: "Admission requests whose policies could not be evaluated; the failure mode decided them.",
	})
)

func init() {
	crmetrics.Registry.MustRegister(admissionTotal, violationsTotal, evaluationErrors)
}

// observe counts an admission response by webhook and result.
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

// ReviewBodyLimit is the size from which an AdmissionReview body is refused. It is
// controller-runtime's own limit (admission.maxRequestSize, unexported), which admission.Webhook
// enforces after this layer: a review carries at most two objects (old and new), each at most
// 3 MiB, the API server's request body limit (twice etcd's recommended 1.5 MiB, for JSON), and
// less than 1 MiB besides. A body this large does not come from a conforming API server.
const ReviewBodyLimit = 7 << 20

// maxReviewTimeout is the longest an API server waits for a webhook (timeoutSeconds ≤ 30).
const maxReviewTimeout = 30 * time.Second

// answerThroughShutdown evaluates a review to its end even when the server begins to shut down
// meanwhile. controller-runtime's webhook server derives every request's context from the
// process's, so a replica that is stopping (a rollout, a drain, helm upgrade) cancels the reviews
// it is still answering; with failure mode deny that denies a valid DaemonSet write ("could not
// evaluate its policies: context canceled"). The server's graceful shutdown waits for these
// handlers; the API server's own deadline, which it sends as the `timeout` query parameter,
// bounds them instead.
func answerThroughShutdown(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timeout := maxReviewTimeout
		if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 && d < timeout {
			timeout = d
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// refuseOversized answers a review body of ReviewBodyLimit bytes or more with HTTP 413 and a
// Status naming the limit, and passes smaller ones to next, labelled as the JSON it answers
// (admission.Webhook sets no Content-Type, which makes the server sniff text/plain).
//
// admission.Webhook alone answers such a body with HTTP 200 and stops reading it, so the server
// hangs up on the rest: HTTP/2 resets the stream, which clients such as curl report as a framing
// error without the answer, and HTTP/1.1 closes the connection under a client still sending. So
// the rest of the body is read and discarded before answering, up to twice the limit in all: a
// client that sends more is cut off rather than served.
func refuseOversized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var read int64
		switch {
		case r.Body == nil || r.Body == http.NoBody || (r.ContentLength >= 0 && r.ContentLength < ReviewBodyLimit):
			next.ServeHTTP(w, r)
			return
		case r.ContentLength < 0:
			// Of unknown length (chunked): read up to the limit to tell.
			head, err := io.ReadAll(io.LimitReader(r.Body, ReviewBodyLimit))
			if err != nil {
				writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("read the review body: %v", err)))
				return
			}
			if len(head) < ReviewBodyLimit {
				r.Body = io.NopCloser(bytes.NewReader(head))
				next.ServeHTTP(w, r)
				return
			}
			read = int64(len(head))
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 2*ReviewBodyLimit-read))
		size := "at least " + strconv.Itoa(ReviewBodyLimit)
		if r.ContentLength >= 0 {
			size = strconv.FormatInt(r.ContentLength, 10)
		}
		writeStatus(w, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the AdmissionReview body of %s bytes is over daemonguard's limit: it must be under %d bytes (7 MiB)", size, ReviewBodyLimit)))
	})
}

// writeStatus answers with a Status, the form the API server answers its own errors in and
// decodes from a webhook that fails.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.ErrStatus
	status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}
