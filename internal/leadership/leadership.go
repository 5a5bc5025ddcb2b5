// Package leadership holds the leader-election timing that daemonguard's webhook (for its audit)
// and rollout controller share.
//
// controller-runtime's defaults (a 15 s lease, renewed within 10 s) end the process when the API
// server is out of reach for more than 10 s, which a restart of the API server or etcd takes
// (kube-apiserver's own pod has 30 s to shut down). These values, the ones OpenShift gives its
// operators for the same reason, let leaders outlast an outage of up to RenewDeadline and
// reconnect in place; a leader that crashes is replaced after LeaseDuration, one that shuts down
// releases its lease at once (ReleaseOnCancel).
package leadership

import "time"

// Leader-election timing, in the fields of controller-runtime's manager.Options.
const (
	// LeaseDuration is how long a lease that is not renewed keeps others from taking over.
	LeaseDuration = 137 * time.Second
	// RenewDeadline is how long the leader tries to renew before it gives up and exits.
	RenewDeadline = 107 * time.Second
	// RetryPeriod is the time between attempts to acquire or renew.
	RetryPeriod = 26 * time.Second
)

// Timing is a leader election's timing; the zero value means the constants above.
type Timing struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// orDefault returns t, or the constants above when t is zero. Tests of what happens when a lease
// is lost shorten it; processes run with the constants.
func (t Timing) orDefault() Timing {
	if t == (Timing{}) {
		return Timing{LeaseDuration: LeaseDuration, RenewDeadline: RenewDeadline, RetryPeriod: RetryPeriod}
	}
	return t
}
