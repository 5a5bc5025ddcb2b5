package apibench

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	tests := map[string]struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		"no samples":                    {nil, 0.5, 0},
		"one sample is every quantile":  {ms(7), 0.99, 7 * time.Millisecond},
		"the median of four is the 2nd": {ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		"p99 of 100 is the 99th":        {ms(seq(100)...), 0.99, 99 * time.Millisecond},
		"p99 of 10 is the largest":      {ms(seq(10)...), 0.99, 10 * time.Millisecond},
	}
	for name, tc := range tests {
		if got := percentile(tc.sorted, tc.q); got != tc.want {
			t.Errorf("%s: got %v, want %v", name, got, tc.want)
		}
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

// Two readings of the API server's metrics: the webhook calls in between, per webhook and
// operation, rejected ones included.
const metricsBefore = `# HELP apiserver_admission_webhook_admission_duration_seconds x
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit",le="0.005"} 10
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit",le="0.025"} 10
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} 10
apiserver_admission_webhook_admission_duration_seconds_sum{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit"} 0.02
apiserver_admission_webhook_admission_duration_seconds_count{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit"} 10
`

const metricsAfter = `# HELP apiserver_admission_webhook_admission_duration_seconds x
# TYPE apiserver_admission_webhook_admission_duration_seconds histogram
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit",le="0.005"} 108
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit",le="0.025"} 109
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit",le="+Inf"} 110
apiserver_admission_webhook_admission_duration_seconds_sum{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit"} 0.32
apiserver_admission_webhook_admission_duration_seconds_count{name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit"} 110
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.validate.daemonguard.io",operation="UPDATE",rejected="true",type="validating",le="0.005"} 1
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.validate.daemonguard.io",operation="UPDATE",rejected="true",type="validating",le="0.025"} 2
apiserver_admission_webhook_admission_duration_seconds_bucket{name="daemonsets.validate.daemonguard.io",operation="UPDATE",rejected="true",type="validating",le="+Inf"} 2
apiserver_admission_webhook_admission_duration_seconds_sum{name="daemonsets.validate.daemonguard.io",operation="UPDATE",rejected="true",type="validating"} 0.012
apiserver_admission_webhook_admission_duration_seconds_count{name="daemonsets.validate.daemonguard.io",operation="UPDATE",rejected="true",type="validating"} 2
`

func TestWebhookLatenciesBetweenReadings(t *testing.T) {
	before, err := parseWebhookDurations(strings.NewReader(metricsBefore))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseWebhookDurations(strings.NewReader(metricsAfter))
	if err != nil {
		t.Fatal(err)
	}
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
