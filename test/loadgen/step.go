package loadgen

import (
	"context"
	"crypto/x509"
	"net/http"
	"time"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// StepSpec is one step of an open-loop run against one target, for benchmarks that drive targets
// Run does not start (test/peerbench drives Gatekeeper too).
type StepSpec struct {
	Rate        int           // requests per second
	Timeout     time.Duration // per request, from its due time
	MaxInFlight int           // as Config.MaxInFlight
	ID          uint32        // makes every request's UID unique across the run's steps
}

// RunStep sends seq (indices into cases) to t at spec's rate, open loop, exactly as Run's steps
// do, and returns the latencies; a request fails unless the answer is HTTP 200, carries the
// request's UID, allows, and carries a patch just when t.WantPatch says. The process columns of
// the result are left zero.
func RunStep(ctx context.Context, client *http.Client, t *Target, spec StepSpec, cases []fixture.Case, seq []int) Result {
	return runStep(ctx, client, t, stepSpec{rate: spec.Rate, timeout: spec.Timeout, maxInFlight: spec.MaxInFlight, id: spec.ID}, cases, seq)
}

// NewClient is the client Run uses for one target: HTTP/2 over one multiplexed connection, or with
// http1 as many keep-alive HTTP/1.1 connections as requests in flight, trusting pool.
func NewClient(pool *x509.CertPool, http1 bool) *http.Client {
	return newClient(pool, http1)
}
