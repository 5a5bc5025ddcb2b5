package rolloutbench

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/test/promtest"
)

// Each wave is paired with the next wave's first deletion, the queries and the analysis start in
// between; the overhead is what the gap between waves holds beyond the gate's wait.
func TestGateTiming(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	waves := []wave{
		{firstDelete: at(0), lastReady: at(2000)},
		{firstDelete: at(4100), lastReady: at(6500)},
		{firstDelete: at(8600), lastReady: at(11000)},
	}
	queries := []promtest.LoggedQuery{
		{At: at(3050)},                 // wave 1, passes
		{At: at(7400)}, {At: at(8500)}, // wave 2: inconclusive, then passes
		{At: at(12000)}, {At: at(13000)}, // wave 3, then one after the rollout
	}
	starts := []time.Time{at(2050), at(6600), at(11000)}
	gws := gateWaves(waves, at(12100), queries, starts)
	got := timing(gws, time.Second)
	d := func(ms ...int) []time.Duration {
		out := make([]time.Duration, len(ms))
		for i, m := range ms {
			out[i] = time.Duration(m) * time.Millisecond
		}
		return out
	}
	want := gateTiming{
		replace:      d(2000, 2400, 2400),
		toStart:      d(50, 100),
		startToQuery: d(1000, 1900),
		toDelete:     d(1050, 100),
		overhead:     d(1100, 1100),
		lastToDone:   100 * time.Millisecond,
		queries:      []int{1, 2, 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("timing =\n%+v, want\n%+v", got, want)
	}
}

// A histogram and a counter read from the controller's text exposition, before and after: the
// observations in between, their bucket bounds, and the counts by label.
func TestControllerMetrics(t *testing.T) {
	const before = `# TYPE q histogram
q_bucket{result="ok",le="0.01"} 1
q_bucket{result="ok",le="0.05"} 1
q_bucket{result="ok",le="+Inf"} 1
q_sum{result="ok"} 0.005
q_count{result="ok"} 1
# TYPE m counter
m{namespace="gated",result="Passed"} 2
m{namespace="other",result="Passed"} 7
`
	const after = `# TYPE q histogram
q_bucket{result="ok",le="0.01"} 91
q_bucket{result="ok",le="0.05"} 100
q_bucket{result="ok",le="+Inf"} 101
q_sum{result="ok"} 1.005
q_count{result="ok"} 101
# TYPE m counter
m{namespace="gated",result="Passed"} 12
m{namespace="gated",result="Inconclusive"} 1
m{namespace="other",result="Passed"} 9
`
	b, err := parseMetrics(before)
	if err != nil {
		t.Fatal(err)
	}
	a, err := parseMetrics(after)
	if err != nil {
		t.Fatal(err)
	}
	h := histogramOf(a, "q", nil).since(histogramOf(b, "q", nil))
	if h.count != 100 || math.Abs(h.sum-1) > 1e-9 {
		t.Errorf("count %v, sum %v; want 100 observations summing to 1 s", h.count, h.sum)
	}
	for q, want := range map[float64]float64{0.5: 0.01, 0.9: 0.01, 0.99: 0.05, 1: math.Inf(1)} {
		if got := h.bound(q); got != want {
			t.Errorf("bound(%v) = %v, want %v", q, got, want)
		}
	}
	gated := map[string]string{"namespace": "gated"}
	if got := countsSince(counterSum(a, "m", gated, "result"), counterSum(b, "m", gated, "result")); got != "Inconclusive=1 Passed=10" {
		t.Errorf("measurements %q, want Inconclusive=1 Passed=10", got)
	}
}
