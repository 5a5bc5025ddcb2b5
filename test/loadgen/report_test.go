package loadgen

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRatiosAndGoal(t *testing.T) {
	rep := &Report{}
	rep.Config.Rates = []int{1000, 2000, 3000}
	ms := time.Millisecond
	rep.Results = []Result{
		{Target: Null, Rate: 1000, Sent: 10, OK: 10, P50: 1 * ms, P99: 4 * ms},
		{Target: Daemonguard, Rate: 1000, Sent: 10, OK: 10, P50: 1200 * time.Microsecond, P99: 5 * ms},
		{Target: Daemonguard, Rate: 2000, Sent: 10, OK: 10, P50: 2 * ms, P99: 5 * ms},
		{Target: Null, Rate: 2000, Sent: 10, OK: 10, P50: 1 * ms, P99: 4 * ms},
		{Target: Null, Rate: 3000, Sent: 10, OK: 9, Errors: 1, P50: 1 * ms, P99: 4 * ms},
		{Target: Daemonguard, Rate: 3000, Sent: 10, OK: 10, P50: 1 * ms, P99: 4 * ms},
	}
	rows := rep.Ratios(DefaultGoal)
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
	if r := rows[0]; r.Rate != 1000 || r.P50 != 1.2 || r.P99 != 1.25 || !r.P50Met || !r.P99Met {
		t.Errorf("1000/s: %+v", r)
	}
	if r := rows[1]; r.P50 != 2 || r.P50Met || !r.P99Met {
		t.Errorf("2000/s: %+v", r)
	}
	if r := rows[2]; r.P50Met || r.P99Met || r.Errors != 1 {
		t.Errorf("errors must fail the goal: %+v", r)
	}
	assertMarkdownHas(t, rep, "| 1000 | 1.20x | 1.25x | met |", "| 2000 | 2.00x | 1.25x | not met (p50) |", "| 3000 | 1.00x | 1.00x | not met (errors: 1) |")
}

// With rounds, each round has its own ratios and the median over rounds discounts one disturbed
// round; errors in any round fail the median too.
func TestMedianRatiosOverRounds(t *testing.T) {
	ms := time.Millisecond
	pair := func(round, rate int, dgP50, dgP99 time.Duration, errors int) []Result {
		return []Result{
			{Round: round, Target: Null, Rate: rate, Sent: 10, OK: 10, P50: 1 * ms, P99: 10 * ms},
			{Round: round, Target: Daemonguard, Rate: rate, Sent: 10, OK: 10 - errors, Errors: errors, P50: dgP50, P99: dgP99},
		}
	}
	rep := &Report{}
	rep.Config.Rates, rep.Config.Rounds = []int{1000, 2000}, 3
	for _, rs := range [][]Result{
		pair(1, 1000, 1100*time.Microsecond, 12*ms, 0), pair(1, 2000, 1*ms, 10*ms, 0),
		pair(2, 1000, 3*ms, 40*ms, 0), pair(2, 2000, 1*ms, 10*ms, 1), // 1000/s disturbed
		pair(3, 1000, 1200*time.Microsecond, 14*ms, 0), pair(3, 2000, 1*ms, 10*ms, 0),
	} {
		rep.Results = append(rep.Results, rs...)
	}
	if rows := rep.Ratios(DefaultGoal); len(rows) != 6 || rows[2].Round != 2 || rows[2].Rate != 1000 || rows[2].P50 != 3 {
		t.Fatalf("per-round ratios: %+v", rows)
	}
	med := rep.MedianRatios(DefaultGoal)
	if len(med) != 2 {
		t.Fatalf("median rows: %+v", med)
	}
	if m := med[0]; m.Round != 0 || m.Rate != 1000 || m.P50 != 1.2 || m.P99 != 1.4 || !m.P50Met || !m.P99Met {
		t.Errorf("1000/s median: %+v, want 1.2x and 1.4x, met", m)
	}
	if m := med[1]; m.Errors != 1 || m.P50Met || m.P99Met {
		t.Errorf("2000/s median with an error in one round: %+v, want not met", m)
	}
	nan := *rep
	nan.Results = slices.Clone(rep.Results)
	nan.Results[0].P50 = 0 // a null step that measured nothing: no ratio
	if m := nan.MedianRatios(DefaultGoal)[0]; !math.IsNaN(m.P50) || m.P50Met {
		t.Errorf("a round without a ratio: median %v, met %v; want no median and not met", m.P50, m.P50Met)
	}
	rep.Config.Rounds = 2
	rep.Results = rep.Results[:8]
	if m := rep.MedianRatios(DefaultGoal)[0]; m.P50 != 2.05 {
		t.Errorf("median of two rounds: %v, want the mean of both (2.05)", m.P50)
	}
	assertMarkdownHas(t, rep, "Median over the 2 rounds", "| median | 1000 | 2.05x |", "| 2 | 1000 | 3.00x | 4.00x | not met (p50 and p99) |")
}

// assertMarkdownHas checks that the Markdown report of rep holds every line part of wants.
func assertMarkdownHas(t *testing.T, rep *Report, wants ...string) {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b, DefaultGoal); err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}
