package webhook

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

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
	metrics.Registry.MustRegister(admissionTotal, violationsTotal, evaluationErrors)
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
