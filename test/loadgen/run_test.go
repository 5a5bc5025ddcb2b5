package loadgen

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// A slow server: requests beyond the in-flight cap wait for a slot instead of piling onto the
// server, and all of them are still answered.
func TestRunStepCapsRequestsInFlight(t *testing.T) {
	var inFlight, peak atomic.Int32
	ts := httptest.NewTLSServer(&admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		return admission.Allowed("")
	})})
	defer ts.Close()
	cases, err := fixture.Cases()
	if err != nil {
		t.Fatal(err)
	}
	seq, err := Sequence(cases, DefaultMix(), 40, 1)
	if err != nil {
		t.Fatal(err)
	}
	target := &Target{Name: Null, URL: ts.URL, WantPatch: func(*fixture.Case) bool { return false }}
	r := runStep(t.Context(), ts.Client(), target, stepSpec{rate: 400, timeout: 10 * time.Second, maxInFlight: 3, id: 1}, cases, seq)
	if r.Sent != 40 || r.OK != 40 || r.Errors != 0 {
		t.Errorf("sent %d, ok %d, errors %d: %v", r.Sent, r.OK, r.Errors, r.ErrorSamples)
	}
	if p := peak.Load(); p > 3 {
		t.Errorf("%d requests in flight at once, cap 3", p)
	}
}

// A request that cannot even get a slot before its deadline fails as a timeout.
func TestRunStepTimesOutFromTheDueTime(t *testing.T) {
	release := make(chan struct{})
	ts := httptest.NewTLSServer(&admission.Webhook{Handler: admission.HandlerFunc(func(ctx context.Context, _ admission.Request) admission.Response {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return admission.Allowed("")
	})})
	defer ts.Close()
	defer close(release)
	cases, _ := fixture.Cases()
	seq, _ := Sequence(cases, DefaultMix(), 4, 1)
	target := &Target{Name: Null, URL: ts.URL, WantPatch: func(*fixture.Case) bool { return false }}
	r := runStep(t.Context(), ts.Client(), target, stepSpec{rate: 100, timeout: 200 * time.Millisecond, maxInFlight: 1, id: 1}, cases, seq)
	if r.Errors != 4 || r.OK != 0 {
		t.Errorf("ok %d, errors %d, want every request timed out: %v", r.OK, r.Errors, r.ErrorSamples)
	}
	if r.Max < 200*time.Millisecond {
		t.Errorf("max latency %v, want at least the timeout", r.Max)
	}
}

func TestRunRejectsARateGivenTwice(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Rates = []int{1000, 2000, 1000}
	if _, err := Run(t.Context(), cfg, &Servers{}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("err %v, want one about the rate given twice", err)
	}
}
