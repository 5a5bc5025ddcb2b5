package webhook

import (
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
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

// TestEveryAnswerResultIsExportedFromTheStart proves that serving the webhooks (Endpoints) exports
// the request counter and the latency histogram of every result a webhook can answer with, at 0
// before any request is answered: a rate of errors or denials is 0, not absent, until the first
// one, and the first one counts.
func TestEveryAnswerResultIsExportedFromTheStart(t *testing.T) {
	counter := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fresh_total", Help: "A counter the test owns."}, []string{"webhook", "result"})
	histogram := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fresh_seconds", Help: "A histogram the test owns."}, []string{"webhook", "result"})
	exportAnswerResults(counter, histogram)
	want := 0
	for webhook, results := range answerResults {
		for _, result := range results {
			want++
			if v := testutil.ToFloat64(counter.WithLabelValues(webhook, result)); v != 0 {
				t.Errorf("counter {webhook=%q, result=%q} starts at %v, want 0", webhook, result, v)
			}
			var h dto.Metric
			if err := histogram.WithLabelValues(webhook, result).(prometheus.Metric).Write(&h); err != nil {
				t.Fatal(err)
			}
			if n := h.GetHistogram().GetSampleCount(); n != 0 {
				t.Errorf("histogram {webhook=%q, result=%q} starts with %d observations, want 0", webhook, result, n)
			}
		}
	}
	if got := testutil.CollectAndCount(counter); got != want {
		t.Errorf("%d counter series exported, want the %d of answerResults", got, want)
	}
	if got := testutil.CollectAndCount(histogram); got != want {
		t.Errorf("%d histograms exported, want the %d of answerResults", got, want)
	}

	testHandlers(t).Endpoints()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"daemonguard_admission_requests_total", "daemonguard_admission_duration_seconds"} {
		exported := map[[2]string]bool{}
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				var key [2]string
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "webhook":
						key[0] = l.GetValue()
					case "result":
						key[1] = l.GetValue()
					}
				}
				exported[key] = true
			}
		}
		for webhook, results := range answerResults {
			for _, result := range results {
				if !exported[[2]string{webhook, result}] {
					t.Errorf("with the webhooks served, the registry does not export %s{webhook=%q, result=%q}", name, webhook, result)
				}
			}
		}
	}
}
