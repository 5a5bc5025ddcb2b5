// Package webhook serves daemonguard's admission core (internal/admission) to the API server:
// endpoints.go holds the thin controller-runtime handlers that adapt the core to AdmissionReviews
// (decode, answer, count), and configurations.go the mutating and validating webhook
// configurations that register them.
package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// Webhook paths served by daemonguard.
const (
	MutateDaemonSetPath   = "/mutate-apps-v1-daemonset"
	ValidateDaemonSetPath = "/validate-apps-v1-daemonset"
	MutatePodPath         = "/mutate-v1-pod"
)

// Handlers adapts the admission core to admission requests.
type Handlers struct {
	Engine           *policy.Engine
	ExemptNamespaces []string
	FailureMode      admission.FailureMode
	Lookups          admission.Lookups
	// Bounds bound each policy evaluation (bounds.go); zero fields take DefaultBounds'.
	Bounds Bounds
	// Stopping reports whether the process is shutting down its server, which ends the context
	// of every request in flight: those reviews are still evaluated to their end, while one whose
	// client hung up is not (boundRequest). nil: never.
	Stopping func() bool
	Log      logr.Logger
}

// Endpoints returns the HTTP handlers of the three webhooks by path, each a controller-runtime
// admission.Webhook: it decodes reviews, answers malformed ones, recovers panics and encodes
// patches, so that the handlers here only decide. Bodies over the size limit are answered
// before it (refuseOversized), and each review runs under the server's deadline
// (boundRequest). The two DaemonSet webhooks share one gate, which bounds their evaluations
// together; the pod webhook evaluates no policy and is not gated.
func (h *Handlers) Endpoints() map[string]http.Handler {
	// Here rather than at init: the controller runs the same binary, and serves no webhook
	// whose answers it could count.
	registerMetrics()
	exportAnswerResults(admissionTotal, admissionDuration)
	return h.endpoints(newGate(h.Bounds, h.Log))
}

// endpoints are the Endpoints with their DaemonSet evaluations gated by g.
func (h *Handlers) endpoints(g *gate) map[string]http.Handler {
	return map[string]http.Handler{
		MutateDaemonSetPath:   h.boundRequest(refuseOversized(&cradmission.Webhook{Handler: DaemonSetMutator{h, g}, LogConstructor: requestLogger})),
		ValidateDaemonSetPath: h.boundRequest(refuseOversized(&cradmission.Webhook{Handler: DaemonSetValidator{h, g}, LogConstructor: requestLogger})),
		MutatePodPath:         h.boundRequest(refuseOversized(&cradmission.Webhook{Handler: PodPinner{h}, LogConstructor: requestLogger})),
	}
}

// DaemonSetMutator injects what the inject policy decides into DaemonSet pod templates.
type DaemonSetMutator struct {
	*Handlers
	gate *gate
}

// Handle implements controller-runtime's admission.Handler.
func (m DaemonSetMutator) Handle(ctx context.Context, req cradmission.Request) cradmission.Response {
	return m.observe("mutate-daemonset", func() cradmission.Response {
		return m.review(ctx, m.gate, req, (*admission.Reviewer).Mutate, patched)
	})
}

// patched answers an injection: the patch, or why there is none.
func patched(_ cradmission.Request, r admission.Outcome) cradmission.Response {
	if len(r.Patch) > 0 {
		return cradmission.Patched("", r.Patch...)
	}
	if r.Inject.Inject {
		return cradmission.Allowed("template already has everything the inject policy asks for")
	}
	return cradmission.Allowed(r.Inject.Reason)
}

// DaemonSetValidator enforces the validation policies on DaemonSets.
type DaemonSetValidator struct {
	*Handlers
	gate *gate
}

// Handle implements controller-runtime's admission.Handler.
func (v DaemonSetValidator) Handle(ctx context.Context, req cradmission.Request) cradmission.Response {
	return v.observe("validate-daemonset", func() cradmission.Response {
		return v.review(ctx, v.gate, req, (*admission.Reviewer).Validate, v.judged)
	})
}

// judged answers a validation with its verdict, counting the violations and logging the dry runs.
func (v DaemonSetValidator) judged(req cradmission.Request, r admission.Outcome) cradmission.Response {
	for _, x := range r.Violations {
		violationsTotal.WithLabelValues(x.Policy, string(x.Action)).Inc()
	}
	for _, d := range r.Verdict.DryRuns {
		v.Log.Info("Dry-run policy violated", "policy", d.Policy, "field", d.Field, "message", d.Message, "namespace", req.Namespace, "name", req.Name)
	}
	return answer(r.Verdict)
}

// review runs one of the core's DaemonSet reviews (Mutate or Validate) on a request, if the gate
// admits it; one it refuses gets the failure mode's answer at once. A review the core ended early
// is answered here; any other is answered from its outcome by respond.
func (h *Handlers) review(ctx context.Context, g *gate, req cradmission.Request,
	run func(*admission.Reviewer, context.Context, *policy.Set, admission.Review) admission.Outcome,
	respond func(cradmission.Request, admission.Outcome) cradmission.Response,
) cradmission.Response {
	if resp, ok := daemonSetOnly(req); !ok {
		return resp
	}
	ctx, done, err := g.enter(ctx)
	if err != nil {
		countBound(err)
		h.Log.Info("Refused a review at a bound; the failure mode answered it", "reason", err, "namespace", req.Namespace, "name", req.Name, "failureMode", h.FailureMode)
		return answer(h.FailureMode.Verdict(err))
	}
	defer done()
	reviewer := &admission.Reviewer{Exempt: h.ExemptNamespaces, FailureMode: h.FailureMode, Lookups: h.Lookups, Log: h.Log}
	review := admission.Review{Operation: policy.Operation(req.Operation), Namespace: req.Namespace, Object: req.Object.Raw, OldObject: req.OldObject.Raw}
	r := run(reviewer, ctx, h.Engine.Set(), review)
	if r.Failed != nil {
		// The core sees a context that ended; its cause says which bound ended it.
		if cause := context.Cause(ctx); cause != nil && !errors.Is(r.Failed, cause) {
			r.Failed = fmt.Errorf("%w: %w", cause, r.Failed)
			r.Verdict = h.FailureMode.Verdict(r.Failed)
		}
		if errors.Is(r.Failed, errClientGone) {
			// Nobody reads this answer, and the policies did not fail: not an evaluation error,
			// which alerts, however often a client hangs up.
			h.Log.V(1).Info("Stopped an evaluation whose client hung up", "namespace", req.Namespace, "name", req.Name)
			return answer(r.Verdict)
		}
		countBound(r.Failed)
	}
	if resp, ended := h.ended(req, r); ended {
		return resp
	}
	return respond(req, r)
}

// daemonSetOnly answers a request for anything but an apps/v1 DaemonSet with a bad request.
func daemonSetOnly(req cradmission.Request) (cradmission.Response, bool) {
	if k := req.Kind; k.Group != "apps" || k.Version != "v1" || k.Kind != "DaemonSet" {
		return cradmission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint admits apps/v1 DaemonSet, got %s/%s %s", k.Group, k.Version, k.Kind)), false
	}
	return cradmission.Response{}, true
}

// ended answers a review the core ended early: skipped, malformed, or not evaluated (the core's
// verdict is then the failure mode's).
func (h *Handlers) ended(req cradmission.Request, r admission.Outcome) (cradmission.Response, bool) {
	switch {
	case r.Malformed != nil:
		return cradmission.Errored(http.StatusBadRequest, r.Malformed), true
	case r.Skip != "":
		return cradmission.Allowed(r.Skip), true
	case r.Failed != nil:
		evaluationErrors.Inc()
		h.Log.Error(r.Failed, "Policy evaluation failed", "kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "failureMode", h.FailureMode)
		return answer(r.Verdict), true
	}
	return cradmission.Response{}, false
}

// answer is the response that carries a verdict: its denials, else an admission, with its
// warnings either way.
func answer(v admission.Verdict) cradmission.Response {
	if !v.Allowed {
		return cradmission.Denied(v.DenialMessage()).WithWarnings(v.WarningMessages()...)
	}
	return cradmission.Allowed("").WithWarnings(v.WarningMessages()...)
}

// PodPinner pins DaemonSet pods to their node by node affinity (Pods, CREATE only).
type PodPinner struct{ *Handlers }

// Handle implements controller-runtime's admission.Handler.
func (p PodPinner) Handle(_ context.Context, req cradmission.Request) cradmission.Response {
	return p.observe("mutate-pod", func() cradmission.Response { return p.pin(req) })
}

func (p PodPinner) pin(req cradmission.Request) cradmission.Response {
	if req.Kind.Group != "" || req.Kind.Version != "v1" || req.Kind.Kind != "Pod" {
		return cradmission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint admits v1 Pod, got %s/%s %s", req.Kind.Group, req.Kind.Version, req.Kind.Kind))
	}
	if req.Operation != admissionv1.Create {
		return cradmission.Allowed("only CREATE is pinned")
	}
	// Pods do not pass through the core's decode, which exempts namespaces for DaemonSets
	// (internal/admission's package doc, injection path 2).
	if slices.Contains(p.ExemptNamespaces, req.Namespace) {
		return cradmission.Allowed("namespace " + req.Namespace + " is exempt")
	}
	res, err := admission.PodPinPatch(req.Object.Raw)
	if err != nil {
		return cradmission.Errored(http.StatusBadRequest, err)
	}
	if len(res.Patch) == 0 {
		return cradmission.Allowed(res.Reason)
	}
	return cradmission.Patched(res.Reason, res.Patch...)
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
	// The API server waits for a webhook at most timeoutSeconds (the chart's 2 s for pods, up to
	// 30 s): the buckets span a fast cached answer to that deadline.
	admissionDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "daemonguard_admission_duration_seconds",
		Help:    "Time from a decoded admission request to its answer, by webhook and result: the latency daemonguard adds to a write, without TLS and the network.",
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}, []string{"webhook", "result"})
)

// answerResults are the results each webhook can answer with (observe): mutate-daemonset denies
// only by the failure mode, when the policies could not be evaluated; validate-daemonset never
// patches; mutate-pod never denies.
var answerResults = map[string][]string{
	"mutate-daemonset":   {"allowed", "patched", "denied", "error"},
	"validate-daemonset": {"allowed", "denied", "error"},
	"mutate-pod":         {"allowed", "patched", "error"},
}

// registerMetrics registers the admission metrics once, when the webhooks are served: the
// controller runs the same binary, and must not export a webhook's series.
var registerMetrics = sync.OnceFunc(func() {
	crmetrics.Registry.MustRegister(admissionTotal, violationsTotal, evaluationErrors, admissionDuration, rejectedTotal)
	// Both reasons from 0, as exportAnswerResults does for the answers.
	rejectedTotal.WithLabelValues(rejectedConcurrency)
	rejectedTotal.WithLabelValues(rejectedMemory)
})

// exportAnswerResults creates the request counter and the latency histogram of every result of
// every webhook at 0, as Prometheus's instrumentation practice asks of label values known in
// advance. A result not seen yet (an error, a denial) is then a rate of 0 rather than no series,
// so the alerts' ratio of errors to requests has a value; and the first answers of a result count
// in rate() and increase(), which take a series' first sample as its start, not as an increase.
func exportAnswerResults(counter *prometheus.CounterVec, histogram *prometheus.HistogramVec) {
	for webhook, results := range answerResults {
		for _, result := range results {
			counter.WithLabelValues(webhook, result)
			histogram.WithLabelValues(webhook, result)
		}
	}
}

// observe answers a request with handle and counts and times the answer by webhook and result.
func (h *Handlers) observe(webhook string, handle func() cradmission.Response) cradmission.Response {
	start := time.Now()
	resp := handle()
	boundMessage(&resp)
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
	admissionDuration.WithLabelValues(webhook, result).Observe(time.Since(start).Seconds())
	return resp
}

// boundMessage cuts resp's message at admission.MaxAnswerMessage, the bound of a denial. The
// core bounds its own messages; this guards what an adapter echoes from the request besides (an
// unexpected kind, an error quoting input), so that no answer grows with what the caller sends.
func boundMessage(resp *cradmission.Response) {
	if resp.Result != nil {
		resp.Result.Message = admission.CutMessage(resp.Result.Message, admission.MaxAnswerMessage)
	}
}

// ReviewBodyLimit is the size from which an AdmissionReview body is refused. It is
// controller-runtime's own limit (cradmission.maxRequestSize, unexported), which cradmission.Webhook
// enforces after this layer, and it is what a conforming API server sends at most: a review carries
// at most two objects (old and new) and less than 1 MiB besides; the old one was stored, so it is
// within etcd's request limit (1.5 MiB by default, as protobuf); the new one came in a request body
// of at most 3 MiB (the API server's MaxRequestBodyBytes: twice etcd's limit, for JSON), or grew
// from the old one by a patch whose copies the API server also caps at 3 MiB
// (JSONPatchMaxCopyBytes), and it is stored only if it fits etcd's limit too. Both objects of any
// write etcd can store fit in 7 MiB. A larger body does not come
// from a conforming API server, and what a smaller one costs is bounded by Bounds.
const ReviewBodyLimit = 7 << 20

// refuseOversized answers a review body of ReviewBodyLimit bytes or more with HTTP 413 and a
// Status naming the limit, and passes smaller ones to next, labelled as the JSON it answers
// (cradmission.Webhook sets no Content-Type, which makes the server sniff text/plain).
//
// cradmission.Webhook alone answers such a body with HTTP 200 and stops reading it, so the server
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
