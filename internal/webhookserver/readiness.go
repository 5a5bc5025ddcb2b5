package webhookserver

// This file exports the replica's readiness as a metric, so that Prometheus can tell "no webhook
// replica is ready" (every DaemonSet write then fails or skips policy, by failurePolicy) from a
// replica that merely answers scrapes: the kubelet's readiness is not among daemonguard's series.

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// readinessChecks are the checks of the running server's /readyz, set by Run; nil before it.
var readinessChecks atomic.Pointer[[]healthz.Checker]

// webhookReady is evaluated at scrape time, from the same checks the kubelet's readiness probe
// runs, so it says what the Service's endpoints say a moment later.
var webhookReady = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
	Name: "daemonguard_webhook_ready",
	Help: "1 when this webhook replica passes its readiness checks (webhook server serving TLS, policy ConfigMaps read, not shutting down), 0 otherwise.",
}, replicaReady)

// replicaReady is 1 when every readiness check passes, 0 when one fails or none is set yet.
func replicaReady() float64 {
	checks := readinessChecks.Load()
	if checks == nil {
		return 0
	}
	for _, check := range *checks {
		// Neither check reads the request: the kubelet's probe passes one, a scrape has none.
		if check(nil) != nil {
			return 0
		}
	}
	return 1
}

// addReadinessChecks adds each check to the manager's /readyz under its name and to
// daemonguard_webhook_ready.
func addReadinessChecks(mgr interface {
	AddReadyzCheck(string, healthz.Checker) error
}, checks map[string]healthz.Checker) error {
	all := make([]healthz.Checker, 0, len(checks))
	for name, check := range checks {
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return err
		}
		all = append(all, check)
	}
	readinessChecks.Store(&all)
	return nil
}
