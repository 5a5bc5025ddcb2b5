package apibench

import (
	"io"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/daemonguard/daemonguard/test/webhookreg"
)

// webhookDurationMetric is the API server's histogram of each webhook call, by webhook name,
// operation, type (admit, validating) and whether it rejected the request.
const webhookDurationMetric = "apiserver_admission_webhook_admission_duration_seconds"

// histogram is a cumulative histogram: count and sum, and the cumulative count at each upper
// bound.
type histogram struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64
}

// webhookKey names one histogram series we compare: webhook and operation.
type webhookKey struct{ webhook, operation string }

// parseWebhookDurations reads the API server's metrics (Prometheus text format) and returns the
// webhook duration histograms by webhook and operation, rejected and admitted calls together.
func parseWebhookDurations(r io.Reader) (map[webhookKey]histogram, error) {
	families, err := webhookreg.ParseMetrics(r)
	if err != nil {
		return nil, err
	}
	out := map[webhookKey]histogram{}
	family, ok := families[webhookDurationMetric]
	if !ok {
		return out, nil // no webhook called yet
	}
	for _, m := range family.GetMetric() {
		key := webhookKey{webhook: label(m, "name"), operation: label(m, "operation")}
		h := out[key]
		if h.buckets == nil {
			h.buckets = map[float64]uint64{}
		}
		hist := m.GetHistogram()
		h.count += hist.GetSampleCount()
		h.sum += hist.GetSampleSum()
		for _, b := range hist.GetBucket() {
			h.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
		out[key] = h
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// minus returns what was observed between an earlier reading and this one.
func (h histogram) minus(earlier histogram) histogram {
	out := histogram{count: h.count - earlier.count, sum: h.sum - earlier.sum, buckets: map[float64]uint64{}}
	for bound, c := range h.buckets {
		out.buckets[bound] = c - earlier.buckets[bound]
	}
	return out
}

// upperBound returns the smallest bucket bound below which at least the fraction q of the
// observations fell (+Inf when only the overflow bucket holds them).
func (h histogram) upperBound(q float64) float64 {
	bounds := make([]float64, 0, len(h.buckets))
	for b := range h.buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	want := uint64(math.Ceil(q * float64(h.count)))
	for _, b := range bounds {
		if h.buckets[b] >= want {
			return b
		}
	}
	return math.Inf(1)
}

// latency summarises the histogram as a WebhookLatency.
func (h histogram) latency() WebhookLatency {
	if h.count == 0 {
		return WebhookLatency{}
	}
	seconds := func(s float64) time.Duration {
		if math.IsInf(s, 1) {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(s * float64(time.Second))
	}
	return WebhookLatency{Calls: h.count, Mean: seconds(h.sum / float64(h.count)), P50Max: seconds(h.upperBound(0.5)), P99Max: seconds(h.upperBound(0.99))}
}

// webhookLatencies returns, per webhook, the calls for operation between two readings.
func webhookLatencies(before, after map[webhookKey]histogram, operation string) map[string]WebhookLatency {
	out := map[string]WebhookLatency{}
	for key, h := range after {
		if key.operation != operation {
			continue
		}
		if d := h.minus(before[key]); d.count > 0 {
			out[key.webhook] = d.latency()
		}
	}
	return out
}
