package loadgen

import (
	"bytes"
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
	var b bytes.Buffer
	if err := rep.WriteMarkdown(&b, DefaultGoal); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1000 | 1.20x | 1.25x | met |", "| 2000 | 2.00x | 1.25x | not met (p50) |", "| 3000 | 1.00x | 1.00x | not met (errors: 1) |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, b.String())
		}
	}
}
