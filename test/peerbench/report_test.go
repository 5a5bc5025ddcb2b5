package peerbench

import (
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

func TestWriteMarkdown(t *testing.T) {
	ms := time.Millisecond
	rep := &Report{
		Rates: []int{250, 1000}, Targets: []string{loadgen.Null, Gatekeeper, loadgen.Daemonguard},
		Duration: 10 * time.Second, CPUs: 2, MaxProcs: 1, GoVersion: "go1.26.8", GatekeeperVersion: "v3.23.1",
		Results: []Result{
			{Target: loadgen.Null, Rate: 250, Sent: 2500, P50: ms / 2, P90: ms, P99: 2 * ms, Max: 3 * ms, CPUPerReview: 120 * time.Microsecond, RSS: 40 << 20},
			{Target: Gatekeeper, Rate: 250, Sent: 2500, P50: 2 * ms, P90: 3 * ms, P99: 4 * ms, Max: 9 * ms, CPUPerReview: 900 * time.Microsecond, RSS: 90 << 20},
			{Target: loadgen.Daemonguard, Rate: 250, Sent: 2500, P50: ms, P90: 1500 * time.Microsecond, P99: 2 * ms, Max: 5 * ms, CPUPerReview: 400 * time.Microsecond, RSS: 70 << 20},
			// At 1,000/s Gatekeeper's step is missing (the run was interrupted): no ratio to it.
			{Target: loadgen.Null, Rate: 1000, Sent: 10000, P50: ms, P99: 4 * ms, Max: 8 * ms},
			{Target: loadgen.Daemonguard, Rate: 1000, Sent: 10000, Errors: 3, P50: ms, P99: 6 * ms, Max: 10 * ms, ErrorSamples: []string{"validate-daemonset/create: timeout"}},
		},
	}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"2 CPUs, webhooks with GOMAXPROCS=1, go1.26.8, Gatekeeper v3.23.1",
		"| 250 | gatekeeper | 2,500 | 0 | 2.00 ms | 3.00 ms | 4.00 ms | 9.00 ms | 900 µs | 90 MiB |",
		"| 250 | daemonguard | 2,500 | 0 | 1.00 ms | 1.50 ms | 2.00 ms | 5.00 ms | 400 µs | 70 MiB |",
		"| 1,000 | daemonguard | 10,000 | 3 |",
		"| 250 | 0.50× | 0.50× | 1.00× |",
		"| 1,000 | – | – | 1.50× |",
		"daemonguard at 1000/s: validate-daemonset/create: timeout",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| 1,000 | gatekeeper") {
		t.Errorf("report has a row for a step that did not run:\n%s", out)
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 20000: "20,000", 1234567: "1,234,567", -2500: "-2,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
