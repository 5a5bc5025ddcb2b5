package webhook

import (
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

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
