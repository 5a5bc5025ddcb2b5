package apibench

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testdata holds two readings of the API server's metrics: the webhook calls in between, per
// webhook and operation, rejected ones included.
func TestWebhookLatenciesBetweenReadings(t *testing.T) {
	before, after := readMetrics(t, "metrics-before.txt"), readMetrics(t, "metrics-after.txt")
	creates := webhookLatencies(before, after, "CREATE")
	mutate, ok := creates["daemonsets.mutate.daemonguard.io"]
	if len(creates) != 1 || !ok {
		t.Fatalf("CREATE latencies %v, want the mutating webhook's only", creates)
	}
	// 100 calls took 0.3 s: 3 ms each; 98 of them within 5 ms, 99 within 25 ms.
	want := WebhookLatency{Calls: 100, Mean: 3 * time.Millisecond, P50Max: 5 * time.Millisecond, P99Max: 25 * time.Millisecond}
	if d := mutate.Mean - want.Mean; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("mean %v, want %v", mutate.Mean, want.Mean)
	}
	mutate.Mean = want.Mean
	if mutate != want {
		t.Errorf("got %+v, want %+v", mutate, want)
	}
	updates := webhookLatencies(before, after, "UPDATE")
	if v := updates["daemonsets.validate.daemonguard.io"]; v.Calls != 2 || v.P50Max != 5*time.Millisecond {
		t.Errorf("UPDATE latencies %+v: the rejected calls must count", updates)
	}
	if _, err := parseWebhookDurations(strings.NewReader("not { metrics")); err == nil {
		t.Error("garbage parsed without an error")
	}
}

func TestUpperBoundBeyondTheLastBucketIsInfinite(t *testing.T) {
	h := histogram{count: 10, buckets: map[float64]uint64{0.005: 1, math.Inf(1): 10}}
	if got := h.upperBound(0.5); !math.IsInf(got, 1) {
		t.Errorf("got %v, want +Inf", got)
	}
}

func TestMarkdownComparesTheSetups(t *testing.T) {
	rep := &Report{Rates: []int{100}, Duration: time.Second, Nodes: 5, Steps: []Step{
		{Setup: NoDaemonguard, Rate: 100, Operation: "CREATE", Sent: 50, P50: 4 * time.Millisecond, P99: 9 * time.Millisecond},
		{Setup: NullWebhook, Rate: 100, Operation: "CREATE", Sent: 50, P50: 5 * time.Millisecond, P99: 10 * time.Millisecond},
		{Setup: Daemonguard, Rate: 100, Operation: "CREATE", Sent: 50, P50: 5500 * time.Microsecond, P99: 12 * time.Millisecond, Errors: 1, FirstErr: "boom",
			Webhooks: map[string]WebhookLatency{"daemonsets.mutate.daemonguard.io": {Calls: 50, Mean: time.Millisecond, P99Max: 5 * time.Millisecond}}},
	}}
	var b strings.Builder
	if err := rep.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 100 | CREATE | 50 | 0 / 0 / 1 | 4.0 ms / 5.0 ms / 5.5 ms | 1.5 ms / 0.5 ms | 9.0 ms / 10.0 ms / 12.0 ms | 3.0 ms / 2.0 ms | mutate 1.0 ms (≤5.0 ms) |", "daemonguard at 100/s, CREATE: first error: boom"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// readMetrics parses the webhook durations of a metrics reading in testdata.
func readMetrics(t *testing.T, name string) map[webhookKey]histogram {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	durations, err := parseWebhookDurations(f)
	if err != nil {
		t.Fatal(err)
	}
	return durations
}
