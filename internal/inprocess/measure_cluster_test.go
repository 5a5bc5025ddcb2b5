package inprocess_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/test/harness"
)

var (
	measure       = flag.Bool("measure", false, "run TestMeasureAdmission: admission latency, in-process injection vs the mutating webhook (docs/performance.md)")
	measureWrites = flag.Int("measure-writes", 300, "writes of each kind per round")
	measureRounds = flag.Int("measure-rounds", 3, "rounds per mode, alternating")
)

// TestMeasureAdmission measures what in-process injection saves on the local cluster: the API
// server's own admission metrics and the client-side latency of DaemonSet writes, with injection
// by the mutating webhook (plus the validating webhook) and by the generated policy (plus the
// same validating webhook), in alternating rounds. It reports numbers and asserts nothing about
// them; run it with
//
//	go test ./internal/inprocess -run TestMeasureAdmission -measure -v -count=1
func TestMeasureAdmission(t *testing.T) {
	if !*measure {
		t.Skip("a measurement, not a test: run with -measure")
	}
	needInProcessInjection(t)
	ctx := context.Background()
	createNamespace(t, ctx, "dg-bench", nil)
	objs := generate(t)
	bench := seed(t, "bench")
	if _, err := cluster.Client.AppsV1().DaemonSets("dg-bench").Create(ctx, bench, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer cluster.Client.AppsV1().DaemonSets("dg-bench").Delete(context.Background(), "bench", metav1.DeleteOptions{})

	results := map[string][]roundResult{}
	for round := range *measureRounds {
		for _, mode := range []string{"webhook", "in-process"} {
			inProcess := mode == "in-process"
			var cleanup func()
			if inProcess {
				cleanup = registerPolicy(t, ctx, objs)
				waitPriorityClass(t, ctx, "dg-bench", "system-node-critical")
			}
			w, err := harness.StartWebhook(ctx, cluster, harness.Options{InProcessInjection: inProcess})
			if err != nil {
				t.Fatal(err)
			}
			r := measureRound(t, ctx)
			if cleanup != nil {
				cleanup()
			}
			w.Stop()
			results[mode] = append(results[mode], r)
			t.Logf("round %d %s: %+v", round+1, mode, r)
		}
	}
	t.Log("\n" + formatResults(results))
}

// roundResult holds one round's numbers in milliseconds.
type roundResult struct {
	// Client-side latency of server-side dry-run creates (the injection patches the template)
	// and of real updates of an injected DaemonSet (an annotation; nothing to inject).
	CreateP50, CreateP99, UpdateP50, UpdateP99 float64
	// The API server's own latency of those requests (apiserver_request_duration_seconds,
	// resource daemonsets, verbs POST and PATCH), mean.
	ServerCreateMean, ServerUpdateMean float64
	// The injection as the API server times it: the DaemonSet mutating webhook's call
	// (apiserver_admission_webhook_admission_duration_seconds) or the policy's evaluation
	// (apiserver_mutating_admission_policy_check_duration_seconds), mean and p99.
	InjectMean, InjectP99 float64
	// The API server's mutating admission step (apiserver_admission_step_admission_duration_seconds,
	// type admit), mean: over every request of the round, the cluster's own background writes
	// (leases, pod status, events) included, which are the same in both modes.
	StepMean float64
}

func measureRound(t *testing.T, ctx context.Context) roundResult {
	t.Helper()
	dss := cluster.Client.AppsV1().DaemonSets("dg-bench")
	write := func(i int) (create, update time.Duration) {
		ds := seed(t, fmt.Sprintf("dry-%d", i))
		start := time.Now()
		if _, err := dss.Create(ctx, ds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatal(err)
		}
		create = time.Since(start)
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench/write":"%d-%d"}}}`, time.Now().UnixNano(), i)
		start = time.Now()
		if _, err := dss.Patch(ctx, "bench", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		return create, time.Since(start)
	}
	for i := range 30 { // warm-up: connections, caches, CEL compilation
		write(i)
	}
	before := scrape(t, ctx)
	var creates, updates []float64
	for i := range *measureWrites {
		c, u := write(i)
		creates = append(creates, ms(c))
		updates = append(updates, ms(u))
	}
	after := scrape(t, ctx)

	step := histogramDelta(before, after, "apiserver_admission_step_admission_duration_seconds", map[string]string{"type": "admit", "rejected": "false"})
	inject := histogramDelta(before, after, "apiserver_admission_webhook_admission_duration_seconds", map[string]string{"name": "daemonsets.mutate.daemonguard.io", "type": "admit"})
	if inject.count == 0 {
		inject = histogramDelta(before, after, "apiserver_mutating_admission_policy_check_duration_seconds", map[string]string{"policy": policyName})
	}
	server := func(verb string) histogram {
		return histogramDelta(before, after, "apiserver_request_duration_seconds", map[string]string{"resource": "daemonsets", "subresource": "", "verb": verb})
	}
	return roundResult{
		CreateP50: quantile(creates, 0.5), CreateP99: quantile(creates, 0.99),
		UpdateP50: quantile(updates, 0.5), UpdateP99: quantile(updates, 0.99),
		ServerCreateMean: server("POST").mean() * 1000, ServerUpdateMean: server("PATCH").mean() * 1000,
		InjectMean: inject.mean() * 1000, InjectP99: inject.quantile(0.99) * 1000,
		StepMean: step.mean() * 1000,
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[int(math.Ceil(q*float64(len(s))))-1]
}

// scrape reads the API server's /metrics.
func scrape(t *testing.T, ctx context.Context) map[string]*dto.MetricFamily {
	t.Helper()
	raw, err := cluster.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// histogram is a cumulative histogram summed over the series whose labels include a selector.
type histogram struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64 // upper bound -> cumulative count
}

func sumHistograms(families map[string]*dto.MetricFamily, name string, sel map[string]string) histogram {
	h := histogram{buckets: map[float64]uint64{}}
	f := families[name]
	if f == nil {
		return h
	}
outer:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range sel {
			if labels[k] != v {
				continue outer
			}
		}
		hist := m.GetHistogram()
		h.count += hist.GetSampleCount()
		h.sum += hist.GetSampleSum()
		for _, b := range hist.GetBucket() {
			h.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	return h
}

func histogramDelta(before, after map[string]*dto.MetricFamily, name string, sel map[string]string) histogram {
	a, b := sumHistograms(after, name, sel), sumHistograms(before, name, sel)
	d := histogram{count: a.count - b.count, sum: a.sum - b.sum, buckets: map[float64]uint64{}}
	for le, n := range a.buckets {
		d.buckets[le] = n - b.buckets[le]
	}
	return d
}

func (h histogram) mean() float64 {
	if h.count == 0 {
		return math.NaN()
	}
	return h.sum / float64(h.count)
}

// quantile interpolates within buckets as Prometheus's histogram_quantile does.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	bounds := make([]float64, 0, len(h.buckets))
	for le := range h.buckets {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	rank := q * float64(h.count)
	prevBound, prevCount := 0.0, 0.0
	for _, le := range bounds {
		c := float64(h.buckets[le])
		if c >= rank {
			if math.IsInf(le, 1) {
				return prevBound
			}
			return prevBound + (le-prevBound)*(rank-prevCount)/(c-prevCount)
		}
		prevBound, prevCount = le, c
	}
	return prevBound
}

// formatResults prints the medians over rounds as a Markdown table.
func formatResults(results map[string][]roundResult) string {
	median := func(rs []roundResult, f func(roundResult) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = f(r)
		}
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	rows := []struct {
		name string
		f    func(roundResult) float64
	}{
		{"client: dry-run create p50", func(r roundResult) float64 { return r.CreateP50 }},
		{"client: dry-run create p99", func(r roundResult) float64 { return r.CreateP99 }},
		{"client: update p50", func(r roundResult) float64 { return r.UpdateP50 }},
		{"client: update p99", func(r roundResult) float64 { return r.UpdateP99 }},
		{"API server: dry-run create, mean", func(r roundResult) float64 { return r.ServerCreateMean }},
		{"API server: update, mean", func(r roundResult) float64 { return r.ServerUpdateMean }},
		{"API server: the injection (webhook call / policy evaluation), mean", func(r roundResult) float64 { return r.InjectMean }},
		{"API server: the injection, p99", func(r roundResult) float64 { return r.InjectP99 }},
		{"API server: mutating admission step, mean over all requests", func(r roundResult) float64 { return r.StepMean }},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| ms (median of %d rounds, %d writes each) | mutating webhook | in-process policy |\n| --- | ---: | ---: |\n", len(results["webhook"]), *measureWrites)
	for _, row := range rows {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f |\n", row.name, median(results["webhook"], row.f), median(results["in-process"], row.f))
	}
	return b.String()
}
