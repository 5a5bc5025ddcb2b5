package rolloutbench

import (
	"fmt"
	"math"
	"net/url"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/daemonguard/daemonguard/test/promtest"
)

// gateWave is one wave of a gated rollout as the benchmark saw it, with the gate's queries that
// measured it.
type gateWave struct {
	wave
	// next is the next wave's first deletion; for the last wave, when the benchmark saw the
	// rollout done.
	next time.Time
	last bool
	// queries are the gate's queries Prometheus received after the wave's first deletion and up
	// to next: the last one passed the wave.
	queries []promtest.LoggedQuery
	// started is when the benchmark saw the controller's status say that the wave's analysis
	// started (its first measurement due one interval later); zero if it did not.
	started time.Time
}

// gateWaves pairs each wave with the next wave's first deletion (the last one with done), and
// the gate's queries and the first start of an analysis in between. queries and starts must be in
// time order.
func gateWaves(waves []wave, done time.Time, queries []promtest.LoggedQuery, starts []time.Time) []gateWave {
	out := make([]gateWave, len(waves))
	for i, w := range waves {
		out[i] = gateWave{wave: w, next: done, last: i == len(waves)-1}
		if !out[i].last {
			out[i].next = waves[i+1].firstDelete
		}
		for _, q := range queries {
			if q.At.After(w.firstDelete) && !q.At.After(out[i].next) {
				out[i].queries = append(out[i].queries, q)
			}
		}
		for _, s := range starts {
			if s.After(w.firstDelete) && !s.After(out[i].next) {
				out[i].started = s
				break
			}
		}
	}
	return out
}

// gateTiming is where a gated rollout's waves spend their time, per wave.
type gateTiming struct {
	// replace: the wave's first deletion -> its last new pod Ready (the same chain as without
	// gates, but a wave waits for its slowest pod).
	replace []time.Duration
	// toStart: the wave's last new pod Ready -> the controller's status says its analysis
	// started.
	toStart []time.Duration
	// startToQuery: the analysis started -> the query that passed the wave (the gate's interval).
	startToQuery []time.Duration
	// toDelete: that query -> the next wave's first deletion.
	toDelete []time.Duration
	// overhead: the wave's last Ready -> the next wave's first deletion, beyond the gate's
	// interval × count: what the gate costs a wave besides the wait it asks for.
	overhead []time.Duration
	// lastToDone: the last wave's passing query -> the rollout seen done (polled every 100 ms).
	lastToDone time.Duration
	// queries sent per wave.
	queries []int
}

// timing measures gws; wait is the gate's interval × count.
func timing(gws []gateWave, wait time.Duration) gateTiming {
	var t gateTiming
	for _, w := range gws {
		t.queries = append(t.queries, len(w.queries))
		if w.lastReady.IsZero() {
			continue
		}
		t.replace = append(t.replace, w.lastReady.Sub(w.firstDelete))
		if len(w.queries) == 0 {
			continue
		}
		passed := w.queries[len(w.queries)-1].At
		if w.last {
			t.lastToDone = w.next.Sub(passed)
			continue
		}
		if !w.started.IsZero() {
			t.toStart = append(t.toStart, w.started.Sub(w.lastReady))
			t.startToQuery = append(t.startToQuery, passed.Sub(w.started))
		}
		t.toDelete = append(t.toDelete, w.next.Sub(passed))
		t.overhead = append(t.overhead, w.next.Sub(w.lastReady)-wait)
	}
	return t
}

// table renders the timing: median, p90 (nearest rank) and the sum over the waves.
func (t gateTiming) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-50s %24s %10s\n", "gated rollout, per wave", "median / p90 (n)", "sum")
	row := func(label string, ds []time.Duration) {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		fmt.Fprintf(&b, "%-50s %24s %10s\n", label, fmt.Sprintf("%s / %s (n=%d)", ms(quantile(ds, 0.5)), ms(quantile(ds, 0.9)), len(ds)), ms(sum))
	}
	row("first deletion -> last new pod Ready", t.replace)
	row("last Ready -> analysis start written", t.toStart)
	row("analysis start written -> passing query", t.startToQuery)
	row("passing query -> next wave's first deletion", t.toDelete)
	row("last Ready -> next deletion, beyond interval", t.overhead)
	fmt.Fprintf(&b, "%-50s %24s\n", "last wave: passing query -> rollout seen done", ms(t.lastToDone))
	fmt.Fprintf(&b, "%-50s %24s\n", "queries per wave", fmt.Sprint(t.queries))
	return b.String()
}

// waveLines lists each wave's steps, in milliseconds, for a closer look than the medians.
func waveLines(gws []gateWave) string {
	var b strings.Builder
	for i, w := range gws {
		fmt.Fprintf(&b, "wave %2d: first deletion -> last Ready %s", i+1, ms(w.lastReady.Sub(w.firstDelete)))
		if !w.started.IsZero() {
			fmt.Fprintf(&b, ", -> analysis start %s", ms(w.started.Sub(w.lastReady)))
		}
		for _, q := range w.queries {
			fmt.Fprintf(&b, ", -> query %s", ms(q.At.Sub(w.lastReady)))
		}
		fmt.Fprintf(&b, ", -> next %s\n", ms(w.next.Sub(w.lastReady)))
	}
	return b.String()
}

// queryRequest is how internal/promquery sends query to Prometheus with client_golang: the
// form of a POST (its GET fallback puts the same in the URL), with the controller's timeout.
func queryRequest(query string, timeout time.Duration) string {
	return url.Values{"query": {query}, "timeout": {model.Duration(timeout).String()}}.Encode()
}

// execTimes are the logged queries' execution times in Prometheus.
func execTimes(qs []promtest.LoggedQuery) []time.Duration {
	out := make([]time.Duration, len(qs))
	for i, q := range qs {
		out[i] = q.Exec
	}
	return out
}

// parseMetrics reads a Prometheus text exposition.
func parseMetrics(text string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(text))
}

// hasLabels says whether m has every label of want.
func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// histogram is a Prometheus histogram: cumulative counts by upper bound (ascending), sum and
// count.
type histogram struct {
	bounds, counts []float64
	sum, count     float64
}

// histogramOf sums the histograms of family name whose labels include want.
func histogramOf(families map[string]*dto.MetricFamily, name string, want map[string]string) histogram {
	var h histogram
	for _, m := range families[name].GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		hm := m.GetHistogram()
		h.sum += hm.GetSampleSum()
		h.count += float64(hm.GetSampleCount())
		for i, bk := range hm.GetBucket() {
			if len(h.bounds) <= i {
				h.bounds, h.counts = append(h.bounds, bk.GetUpperBound()), append(h.counts, 0)
			}
			h.counts[i] += float64(bk.GetCumulativeCount())
		}
	}
	return h
}

// since is h minus an earlier reading of the same histogram.
func (h histogram) since(earlier histogram) histogram {
	d := histogram{bounds: h.bounds, counts: make([]float64, len(h.counts)), sum: h.sum - earlier.sum, count: h.count - earlier.count}
	for i := range h.counts {
		d.counts[i] = h.counts[i]
		if i < len(earlier.counts) {
			d.counts[i] -= earlier.counts[i]
		}
	}
	return d
}

// bound is the upper bound of the bucket the q-quantile falls in (+Inf past the last bucket): a
// histogram knows its quantiles only to its buckets; NaN without observations.
func (h histogram) bound(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	for i, c := range h.counts {
		if c >= q*h.count {
			return h.bounds[i]
		}
	}
	return math.Inf(1)
}

// counterSum sums the counters of family name whose labels include want, by the value of label by.
func counterSum(families map[string]*dto.MetricFamily, name string, want map[string]string, by string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range families[name].GetMetric() {
		if !hasLabels(m, want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == by {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// countsSince is counts minus an earlier reading, the keys sorted, as "key=n" pairs.
func countsSince(counts, earlier map[string]float64) string {
	var keys []string
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		if d := counts[k] - earlier[k]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, d))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
