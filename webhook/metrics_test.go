package webhook

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestAnswersAreCountedAndTimed sends one review of each outcome and checks that the request
// counter and the latency histogram both grew by one under the same webhook and result labels.
func TestAnswersAreCountedAndTimed(t *testing.T) {
	eps := testHandlers(t).Endpoints()
	for name, tc := range map[string]struct {
		path, body      string
		webhook, result string
	}{
		"a DaemonSet injected": {
			path: MutateDaemonSetPath, body: review("apps", "v1", "DaemonSet", "CREATE", seedObject),
			webhook: "mutate-daemonset", result: "patched",
		},
		"a DaemonSet validated": {
			path: ValidateDaemonSetPath, body: review("apps", "v1", "DaemonSet", "CREATE", seedObject),
			webhook: "validate-daemonset", result: "allowed",
		},
		"a DaemonSet that is not an object": {
			path: ValidateDaemonSetPath, body: review("apps", "v1", "DaemonSet", "CREATE", `[1,2]`),
			webhook: "validate-daemonset", result: "error",
		},
		"a DaemonSet pod pinned": {
			path: MutatePodPath, body: review("", "v1", "Pod", "CREATE", podObject),
			webhook: "mutate-pod", result: "patched",
		},
	} {
		t.Run(name, func(t *testing.T) {
			counted, timed := observed(t, tc.webhook, tc.result)
			if code, _ := serve(eps[tc.path], []byte(tc.body)); code != http.StatusOK {
				t.Fatalf("HTTP %d", code)
			}
			gotCounted, gotTimed := observed(t, tc.webhook, tc.result)
			if gotCounted != counted+1 {
				t.Errorf("daemonguard_admission_requests_total{%s,%s} = %v, want %v", tc.webhook, tc.result, gotCounted, counted+1)
			}
			if gotTimed != timed+1 {
				t.Errorf("daemonguard_admission_duration_seconds_count{%s,%s} = %d, want %d", tc.webhook, tc.result, gotTimed, timed+1)
			}
		})
	}
}

// observed is how many answers the request counter and the latency histogram hold for webhook
// and result.
func observed(t *testing.T, webhook, result string) (counted float64, timed uint64) {
	t.Helper()
	var c, h dto.Metric
	if err := admissionTotal.WithLabelValues(webhook, result).Write(&c); err != nil {
		t.Fatal(err)
	}
	if err := admissionDuration.WithLabelValues(webhook, result).(prometheus.Metric).Write(&h); err != nil {
		t.Fatal(err)
	}
	return c.GetCounter().GetValue(), h.GetHistogram().GetSampleCount()
}
