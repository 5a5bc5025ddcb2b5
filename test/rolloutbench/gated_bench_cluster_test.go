package rolloutbench

import (
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/test/agentmetrics"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/promtest"
)

// The benchmark's gate is measured once, one second after each wave is up: the smallest interval
// and count allowed, so that the rollout waits as little as a gate can make it and what is left
// beyond interval × count is the gate's own cost. The wait itself is what a user asks for, and is
// reported apart.
const (
	gateInterval = time.Second
	gateCount    = 1
)

// gateQuery is the gate's query: each node's error ratio, for the new revision only (series of
// the old one linger after a Prometheus restart: docs/rollouts.md).
const gateQuery = `max by (node) (agent_error_ratio{node=~"{{ nodes }}",revision="{{ revision }}"})`

// gateQueryPrefix starts every rendering of gateQuery, to tell the gate's queries in Prometheus'
// query log from the benchmark's own.
const gateQueryPrefix = `max by (node) (agent_error_ratio{node=~"`

// gateAnnotation is daemonguard.io/analysis with the benchmark's gate: every node at most 0.1,
// which the exporter's 0 passes.
func gateAnnotation() string {
	return fmt.Sprintf("- {name: errors, query: '%s', max: 0.1, interval: %s, count: %d}", gateQuery, gateInterval, gateCount)
}

// BenchmarkGatedRollout measures what one analysis gate costs a managed rollout: a managed
// rollout without gates, then one with a gate, of identical DaemonSets with the same budget (10%)
// on the same cluster, the gate measured by a real Prometheus scraping a stand-in for the node
// agents every second (test/agentmetrics). It reports the wall times and their ratio, where each
// wave's time goes, the queries per wave, their length and latency, and the CPU and peak RSS of
// the controller and Prometheus. Run it once per size:
//
//	go test -run '^$' -bench GatedRollout -benchtime 1x -timeout 60m ./test/rolloutbench/
func BenchmarkGatedRollout(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				runGated(b, n)
			}
		})
	}
}

// runGated rolls out, on a new cluster of n nodes, the managed DaemonSet without gates and then
// the gated one, and prints and reports what it measured.
func runGated(b *testing.B, n int) {
	c := startCluster(b, n)
	defer c.Stop()
	// Prometheus scrapes the stand-in for the gated DaemonSet's agents from the start, so it
	// works through both rollouts: what differs between them is the gate's queries.
	agents := agentmetrics.New(c.Client, "gated", "agent")
	agents.Watch(b)
	prom := promtest.Start(b, promtest.Options{Targets: []promtest.Target{{Job: "agents", URL: agents.Serve(b)}}, QueryLog: true})
	metricsAddr := "127.0.0.1:" + strconv.Itoa(harness.FreePort(b))
	pid := startControllerProcess(b, c, "--prometheus-address="+prom.Address(), "--metrics-bind-address="+metricsAddr)
	scrape := controllerMetrics(b, c, metricsAddr)
	rollouts := []rollout{
		{ns: "managed", title: "managed", annotations: managedSettings()},
		{ns: "gated", title: "managed, one gate", annotations: managedSettings(rolloutapi.AnnotationAnalysis, gateAnnotation())},
	}
	bn := newBench(b, c, n, pid, []process{{"prometheus", prom.PID()}}, rollouts)
	prom.WaitForSamples(b, `agent_error_ratio`, n)

	var results []result
	var before, after []map[string]*dto.MetricFamily
	var rss []int64
	starts := watchAnalysisStarts(b, c, "gated")
	for _, r := range rollouts {
		resetPeakRSS(b, pid) // the peak of this rollout, not of the process's life
		before = append(before, scrape())
		results = append(results, bn.roll(b, r))
		after = append(after, scrape())
		rss = append(rss, clustertest.MemoryKiB(pid, "VmHWM")<<10)
	}
	managed, gated := results[0], results[1]

	logged, err := prom.QueryLog()
	if err != nil {
		b.Fatal(err)
	}
	var queries []promtest.LoggedQuery
	for _, q := range logged {
		if strings.HasPrefix(q.Query, gateQueryPrefix) && !q.At.Before(gated.start) && !q.At.After(gated.done) {
			queries = append(queries, q)
		}
	}
	waves := gated.timeline.waves("agent:1", "agent:2", bn.budget)
	gws := gateWaves(waves, gated.done, queries, starts.times())
	tm := timing(gws, gateInterval*gateCount)
	lookups := largerWaves(b, c, prom, n)

	const name = "daemonguard_rollout_analysis_query_duration_seconds"
	latency := histogramOf(after[1], name, nil).since(histogramOf(before[1], name, nil))
	queryErrors := histogramOf(after[1], name, map[string]string{"result": "error"}).since(histogramOf(before[1], name, map[string]string{"result": "error"}))
	measured := countsSince(counterSum(after[1], "daemonguard_rollout_analysis_measurements_total", map[string]string{"namespace": "gated"}, "result"),
		counterSum(before[1], "daemonguard_rollout_analysis_measurements_total", map[string]string{"namespace": "gated"}, "result"))
	longest := promtest.LoggedQuery{}
	methods := map[string]int{}
	for _, q := range queries {
		methods[q.Method]++
		if len(q.Query) > len(longest.Query) {
			longest = q
		}
	}
	ideal := time.Duration(len(waves)) * (readyDelay + gateInterval*gateCount)
	titles := []string{rollouts[0].title, rollouts[1].title}

	var out strings.Builder
	fmt.Fprintf(&out, "--- %s: %d nodes, budget %d, %d waves: managed %s, gated %s (x%.2f), gated ideal (waves x (readiness delay + interval x count)) %s\n",
		b.Name(), n, bn.budget, len(waves), managed.wall.Round(100*time.Millisecond), gated.wall.Round(100*time.Millisecond),
		gated.wall.Seconds()/managed.wall.Seconds(), ideal)
	out.WriteString(tm.table())
	out.WriteString(waveLines(gws))
	fmt.Fprintf(&out, "gate queries: %d in %d waves (%s); controller's measurements: %s; query errors: %.0f\n",
		len(queries), len(waves), methodList(methods), measured, queryErrors.count)
	fmt.Fprintf(&out, "query latency, controller (client_golang, HTTP included): n=%.0f mean %.1fms, p50 <= %s, p99 <= %s (buckets)\n",
		latency.count, 1000*latency.sum/latency.count, seconds(latency.bound(0.5)), seconds(latency.bound(0.99)))
	fmt.Fprintf(&out, "query latency, Prometheus (execution, query log): p50 %s, p99 %s, max %s\n",
		msFine(quantile(execTimes(queries), 0.5)), msFine(quantile(execTimes(queries), 0.99)), msFine(quantile(execTimes(queries), 1)))
	fmt.Fprintf(&out, "longest gate query: %d nodes, query %d bytes (regex %d), POST body %d bytes, as a GET URL %d bytes\n",
		strings.Count(longest.Query, "|")+1, len(longest.Query), len(regexOf(longest.Query)), len(queryRequest(longest.Query, promquery.DefaultTimeout)),
		len(prom.Address()+"/api/v1/query?"+queryRequest(longest.Query, promquery.DefaultTimeout)))
	for _, l := range lookups {
		fmt.Fprintf(&out, "the gate's query for a wave of %d nodes: query %d bytes, POST body %d bytes, %d samples, Prometheus' execution median %s of %d\n",
			l.nodes, l.queryBytes, l.bodyBytes, l.samples, msFine(quantile(l.exec, 0.5)), len(l.exec))
	}
	out.WriteString(phaseTable(titles, []phases{managed.phases, gated.phases}))
	out.WriteString(cpuTable(titles, bn.procs, []cpuUsage{managed.cpu, gated.cpu}))
	out.WriteString(requestTable(titles, []requestCounts{managed.requests, gated.requests}, float64(n)/20))
	fmt.Fprintf(&out, "%-44s %22.1f %22.1f\n", "controller peak RSS (MiB)", float64(rss[0])/(1<<20), float64(rss[1])/(1<<20))
	// The breakdown is longer than the 10 lines a benchmark's log keeps: print it whole.
	fmt.Print(out.String())

	b.ReportMetric(managed.wall.Seconds(), "managed-s")
	b.ReportMetric(gated.wall.Seconds(), "gated-s")
	b.ReportMetric(gated.wall.Seconds()/managed.wall.Seconds(), "gated/managed")
	b.ReportMetric(ideal.Seconds(), "gated-ideal-s")
	b.ReportMetric(float64(quantile(tm.overhead, 0.5).Milliseconds()), "overhead-per-wave-ms")
	b.ReportMetric(float64(len(queries))/float64(len(waves)), "queries/wave")
	b.ReportMetric(float64(len(longest.Query)), "query-bytes")
	b.ReportMetric(managed.cpu.perProcess["daemonguard controller"].Seconds(), "controller-managed-cpu-s")
	b.ReportMetric(gated.cpu.perProcess["daemonguard controller"].Seconds(), "controller-gated-cpu-s")
	b.ReportMetric(gated.cpu.perProcess["prometheus"].Seconds(), "prometheus-gated-cpu-s")
	b.ReportMetric(float64(rss[0])/(1<<20), "controller-managed-peak-RSS-MiB")
	b.ReportMetric(float64(rss[1])/(1<<20), "controller-gated-peak-RSS-MiB")
}

// controllerMetrics returns a function that reads the controller's /metrics at addr, as a
// ServiceAccount allowed to (the metrics server asks the API server about every token).
func controllerMetrics(b *testing.B, c *localcluster.Cluster, addr string) func() map[string]*dto.MetricFamily {
	ctx := context.Background()
	if err := harness.GrantGet(ctx, c.Client, "default", "rolloutbench-scraper", serving.MetricsPath); err != nil {
		b.Fatal(err)
	}
	token, err := harness.Token(ctx, c.Client, "default", "rolloutbench-scraper")
	if err != nil {
		b.Fatal(err)
	}
	return func() map[string]*dto.MetricFamily {
		// The controller's certificate is self-signed, made at its start.
		status, body, err := harness.Scrape(ctx, "https://"+addr+serving.MetricsPath, token, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // loopback, a benchmark
		if err != nil || status != http.StatusOK {
			b.Fatalf("scrape the controller's metrics: %d %v", status, err)
		}
		families, err := parseMetrics(string(body))
		if err != nil {
			b.Fatal(err)
		}
		return families
	}
}

// analysisStarts are the moments the benchmark saw a DaemonSet's status annotations show an
// analysis under way (a wave being measured) where the update before showed none: when the
// controller wrote that a wave's analysis started.
type analysisStarts struct {
	mu sync.Mutex
	at []time.Time
}

// watchAnalysisStarts records the analysis starts of ns/agent until the benchmark ends.
func watchAnalysisStarts(b *testing.B, c *localcluster.Cluster, ns string) *analysisStarts {
	a := &analysisStarts{}
	stop := make(chan struct{})
	b.Cleanup(func() { close(stop) })
	inf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns)).Apps().V1().DaemonSets().Informer()
	underway := func(obj any) bool {
		ds, ok := obj.(*appsv1.DaemonSet)
		if !ok {
			return false
		}
		status, _ := rolloutapi.DecodeStatus(ds.Annotations) // what did not decode is no analysis
		return status.Analysis != nil && status.Analysis.Wave > 0
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, cur any) {
		if now := time.Now(); !underway(old) && underway(cur) {
			a.mu.Lock()
			a.at = append(a.at, now)
			a.mu.Unlock()
		}
	}}); err != nil {
		b.Fatal(err)
	}
	go inf.Run(stop)
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		b.Fatalf("the DaemonSet informer of %s did not sync", ns)
	}
	return a
}

// times are the starts seen so far, in order.
func (a *analysisStarts) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at)
}

// resetPeakRSS makes the kernel forget pid's peak RSS (VmHWM), so that the next reading is the
// peak since now.
func resetPeakRSS(b *testing.B, pid int) {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		b.Fatal(err)
	}
}

// lookup is the gate's query for a wave larger than the benchmark's, sent as the controller
// sends it.
type lookup struct {
	nodes, queryBytes, bodyBytes, samples int
	exec                                  []time.Duration
}

// largerWaves sends the gate's query, rendered as the controller renders it, for a wave of
// every node and for one of ten times as many node names (most of which match no series), five
// times each as internal/promquery does (client_golang, POST), and reads Prometheus' execution
// times from its query log: how the query grows with a wave past the benchmark's budget.
func largerWaves(b *testing.B, c *localcluster.Cluster, prom *promtest.Server, n int) []lookup {
	ctx := context.Background()
	pods, err := c.Client.CoreV1().Pods("gated").List(ctx, metav1.ListOptions{LabelSelector: "app=agent"})
	if err != nil || len(pods.Items) == 0 {
		b.Fatalf("the gated DaemonSet's pods: %v", err)
	}
	revision := pods.Items[0].Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	var out []lookup
	for _, size := range []int{n, 10 * n} {
		nodes := make([]string, size)
		for i := range nodes {
			nodes[i] = fmt.Sprintf("node-%d", i) // localcluster.WorkerNodes' names
		}
		query := rolloutapi.RenderQuery(gateQuery, rolloutapi.QueryVars{Nodes: nodes, Revision: revision})
		l := lookup{nodes: size, queryBytes: len(query), bodyBytes: len(queryRequest(query, promquery.DefaultTimeout))}
		for range 5 {
			v, _, err := prom.API().Query(ctx, query, time.Time{}, promv1.WithTimeout(promquery.DefaultTimeout))
			if err != nil {
				b.Fatalf("the gate's query for %d nodes: %v", size, err)
			}
			vec, _ := v.(model.Vector)
			l.samples = len(vec)
		}
		logged, err := prom.QueryLog()
		if err != nil {
			b.Fatal(err)
		}
		for _, q := range logged {
			if q.Query == query {
				l.exec = append(l.exec, q.Exec)
			}
		}
		out = append(out, l)
	}
	return out
}

// regexOf is the regular expression a rendered gate query matches node names with.
func regexOf(query string) string {
	rest, _ := strings.CutPrefix(query, gateQueryPrefix)
	re, _, _ := strings.Cut(rest, `"`)
	return re
}

// methodList renders HTTP methods and their counts, e.g. "POST 10".
func methodList(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// seconds renders a histogram bound in milliseconds.
func seconds(s float64) string {
	if math.IsInf(s, 1) || math.IsNaN(s) {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%gms", 1000*s)
}

// msFine renders d in milliseconds to the tenth: Prometheus executes a query in a few.
func msFine(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
