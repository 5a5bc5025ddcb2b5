package peerbench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/loadgen"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// The whole benchmark, for one second at one low rate: Gatekeeper starts from the pinned build,
// reads the template and denies a DaemonSet over budget, and every target answers every review
// of the stream allowed, with its UID, and is measured. It runs where `make bench-peers` has
// built Gatekeeper; `make test` does not build it.
func TestPeerBenchSmoke(t *testing.T) {
	localcluster.NeedCluster(t)
	if _, err := toolbin.Cached(toolbin.GatekeeperBinary, toolbin.GatekeeperManifests); err != nil {
		t.Skipf("%v: run make bench-peers once", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cfg := DefaultConfig()
	cfg.Rates, cfg.Duration, cfg.Warmup, cfg.Pause = []int{50}, time.Second, 0, 100*time.Millisecond
	cfg.Progress = t.Output()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{loadgen.Null, Gatekeeper, loadgen.Daemonguard} {
		r := rep.result(target, 50)
		switch {
		case r == nil:
			t.Errorf("%s was not measured", target)
		case r.Sent != 50 || r.Errors != 0:
			t.Errorf("%s: %d errors of %d reviews, want none of 50: %q", target, r.Errors, r.Sent, r.ErrorSamples)
		case r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 || r.RSS < 1<<20:
			t.Errorf("%s: implausible measurements %+v", target, r)
		}
	}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + b.String())
}
