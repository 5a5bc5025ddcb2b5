package policy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// explodingRule is a rule body whose comprehension holds a hundred million pairs (gigabytes) once
// evaluated.
const explodingRule = `	pairs := [[i, j] | some i in numbers.range(1, 10000); some j in numbers.range(1, 10000)]
	count(pairs) > 0`

// slowRule is a rule body that runs through a hundred million combinations while keeping next to
// nothing: it exceeds a deadline, not a heap budget.
var slowRule = func() string {
	var xs []string
	for i := range 100 {
		xs = append(xs, fmt.Sprint(i))
	}
	arr := "[" + strings.Join(xs, ", ") + "]"
	return fmt.Sprintf("\tsome a in %[1]s\n\tsome b in %[1]s\n\tsome c in %[1]s\n\tsome d in %[1]s\n\ta + b + c + d < 0", arr)
}()

// A set that explodes or runs away while it loads is rejected with the limit, what the load was
// doing and where, so the reloader blames the right ConfigMap; no set is returned.
func TestLoadLimits(t *testing.T) {
	cases := map[string]struct {
		source    string // the module configmap/team/p.rego
		limits    Limits
		wantLimit string // part of LimitError.Limit
		wantWhile string // part of LimitError.While
		wantRow   int    // LimitError.At's line in configmap/team/p.rego; 0: no location
	}{
		"an exploding enforcement rule is stopped by the heap budget": {
			source: "package daemonguard.policies.p\n\nenforcement := \"deny\" if {\n" + explodingRule + "\n}\n",
			limits: Limits{Timeout: time.Minute, HeapBudget: 64 << 20}, wantLimit: "the load memory budget of 64 MiB",
			wantWhile: "evaluating the enforcement rules", wantRow: 4,
		},
		"an exploding violation rule is stopped in the trial by the heap budget": {
			source: "package daemonguard.policies.p\n\nviolation contains {\"field\": \"f\", \"msg\": \"m\"} if {\n" + explodingRule + "\n}\n",
			limits: Limits{Timeout: time.Minute, HeapBudget: 64 << 20}, wantLimit: "the load memory budget of 64 MiB",
			wantWhile: "evaluating the trial DaemonSet ", wantRow: 4,
		},
		"a slow enforcement rule is stopped by the deadline": {
			source: "package daemonguard.policies.p\n\nenforcement := \"deny\" if {\n" + slowRule + "\n}\n",
			limits: Limits{Timeout: 300 * time.Millisecond, HeapBudget: 1 << 40}, wantLimit: "the load deadline of 300ms",
			wantWhile: "evaluating the enforcement rules",
		},
		"a deadline that passes before the compiler ends rejects the set": {
			source: "package daemonguard.policies.p\n\nenforcement := \"deny\"\n",
			limits: Limits{Timeout: time.Nanosecond}, wantLimit: "the load deadline of 1ns",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			set, err := c.limits.Compile(context.Background(), []Module{{Name: "configmap/team/p.rego", Source: c.source}}, nil)
			var le *LimitError
			if !errors.As(err, &le) || set != nil {
				t.Fatalf("set %v, err %v; want no set and a *LimitError", set, err)
			}
			if !strings.Contains(le.Limit, c.wantLimit) || !strings.Contains(le.While, c.wantWhile) {
				t.Errorf("error %q, want the limit %q while %q", err, c.wantLimit, c.wantWhile)
			}
			if !strings.HasPrefix(err.Error(), "policy set exceeded "+le.Limit+" while ") {
				t.Errorf("error %q does not read \"policy set exceeded <limit> while <step>\"", err)
			}
			if c.wantRow > 0 && (le.At == nil || le.At.File != "configmap/team/p.rego" || le.At.Row < c.wantRow) {
				t.Errorf("stopped at %v, want configmap/team/p.rego from line %d", le.At, c.wantRow)
			}
		})
	}
}

// Rejecting an exploding set keeps the heap within the budget. With the garbage collector off for
// the load, nothing allocated is freed, so the bytes allocated during the load are the heap's peak
// growth, read from runtime/metrics rather than sampled.
func TestHeapStaysWithinTheBudgetWhileAnExplodingSetIsRejected(t *testing.T) {
	budgets := map[string]uint64{"a 64 MiB budget": 64 << 20}
	if !testing.Short() {
		budgets["the default budget"] = DefaultLimits.HeapBudget
	}
	source := "package daemonguard.policies.p\n\nenforcement := \"deny\" if {\n" + explodingRule + "\n}\n"
	for name, budget := range budgets {
		t.Run(name, func(t *testing.T) {
			// A load an earlier case abandoned holds the process's load slot until it stops, and
			// allocates meanwhile: wait for it, so that what is measured is this load's.
			loadSlot <- struct{}{}
			<-loadSlot
			// A full collection sweeps what earlier loads left: swept memory reused during the load
			// would hide allocations from the guard (it watches the heap's objects) but not from
			// the allocation count.
			runtime.GC()
			allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			metrics.Read(allocs)
			before := allocs[0].Value.Uint64()
			start := time.Now()
			_, err := Limits{Timeout: time.Minute, HeapBudget: budget}.Compile(context.Background(), []Module{{Name: "configmap/team/p.rego", Source: source}}, nil)
			took := time.Since(start)
			metrics.Read(allocs)
			grew := allocs[0].Value.Uint64() - before
			var le *LimitError
			if !errors.As(err, &le) || !strings.Contains(le.Limit, "memory budget") {
				t.Fatalf("err = %v, want the memory budget's *LimitError", err)
			}
			t.Logf("rejected in %v; the heap grew by %.1f MiB of a %d MiB budget", took.Round(time.Millisecond), float64(grew)/(1<<20), budget>>20)
			if grew >= budget {
				t.Errorf("the heap grew by %d bytes while rejecting, want under the budget of %d", grew, budget)
			}
		})
	}
}
