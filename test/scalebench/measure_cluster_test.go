package scalebench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// measureAudit waits for the first audit pass of the webhook replica web (it starts with the
// replica) and reads what it cost and wrote: its duration (daemonguard_audit_duration_seconds),
// the replica's peak RSS, the Events it recorded and the OpenReports Reports.
func measureAudit(t testing.TB, r *release, web component, s shape) Audit {
	t.Helper()
	var took float64
	token := r.scrapeToken(t)
	r.Cluster.WaitFor(t, 30*time.Minute, "the webhook's first audit pass", func(context.Context) (bool, string) {
		if err := web.Proc.Exited(); err != nil {
			t.Fatalf("the webhook exited: %v", err)
		}
		body := r.scrape(t, web, token)
		last, _ := metricValue(body, "daemonguard_audit_last_run_timestamp_seconds")
		took, _ = metricValue(body, "daemonguard_audit_duration_seconds")
		// A scrape reads the gauges one by one: it can see the pass's end before its duration.
		return last > 0 && took > 0, "no audit finished yet"
	})
	a := Audit{DaemonSets: s.auditDaemonSets + len(agents), Seconds: took, PeakRSSMiB: procStatus(web.Proc.PID(), "VmHWM")}
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(r.Cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	reports := schema.GroupVersionResource{Group: "openreports.io", Version: "v1alpha1", Resource: "reports"}
	// The audit records its Events without waiting for them; they are counted once no more
	// arrive, so the measurements after it do not run beside the audit's writes.
	countEvents := func(ctx context.Context) (n int, byReason map[string]int, err error) {
		byReason = map[string]int{}
		for _, ns := range append([]string{platformNamespace}, teamNames()...) {
			events, err := r.Cluster.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return 0, nil, err
			}
			for _, e := range events.Items {
				// The replica's own: the one before it audited the platform's DaemonSets too.
				if e.ReportingController == "daemonguard-audit" && !e.EventTime.Time.Before(web.started) {
					n++
					byReason[e.Reason]++
				}
			}
		}
		return n, byReason, nil
	}
	last, since := -1, time.Now()
	var byReason map[string]int
	r.Cluster.WaitFor(t, 15*time.Minute, "the audit's Events written", func(ctx context.Context) (bool, string) {
		n, reasons, err := countEvents(ctx)
		if err != nil {
			return false, err.Error()
		}
		if n != last {
			last, since, byReason = n, time.Now(), reasons
		}
		return time.Since(since) >= 15*time.Second, fmt.Sprintf("%d Events so far", n)
	})
	a.Events = last
	logf(t, "the audit's Events by reason: %v", byReason)
	for _, ns := range append([]string{platformNamespace}, teamNames()...) {
		list, err := dyn.Resource(reports).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, item := range list.Items {
			data, err := json.Marshal(item.Object)
			if err != nil {
				t.Fatal(err)
			}
			a.Reports++
			a.LargestReportBytes = max(a.LargestReportBytes, len(data))
		}
	}
	if a.Reports == 0 {
		t.Fatalf("the audit wrote no OpenReports Report")
	}
	return a
}

func teamNames() []string {
	names := make([]string, teams)
	for i := range names {
		names[i] = team(i)
	}
	return names
}

// measureReviews sends n server-side dry-run creates of a platform DaemonSet through the API
// server, one after the other, and returns their p50 and p99 wall time: what a DaemonSet write
// costs its author with daemonguard's webhooks in the path (mutation and validation).
func measureReviews(t testing.TB, c *localcluster.Cluster, n int) (p50, p99 time.Duration) {
	t.Helper()
	ctx := context.Background()
	ds := agents[0].daemonSet("agent:review")
	ds.Name = "review"
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// The API server loads the chart's MutatingAdmissionPolicy through an informer of its own, so
	// a ready webhook says nothing of it: wait until a dry-run create is injected before timing.
	c.WaitFor(t, 2*time.Minute, "a dry-run create with daemonguard's injection", func(ctx context.Context) (bool, string) {
		out, err := c.Client.AppsV1().DaemonSets(platformNamespace).Create(ctx, ds, dryRun)
		if err != nil {
			return false, err.Error()
		}
		return len(out.Spec.Template.Spec.Tolerations) > 0, fmt.Sprintf("%+v", out.Spec.Template.Spec)
	})
	var took []time.Duration
	for range n {
		start := time.Now()
		out, err := c.Client.AppsV1().DaemonSets(platformNamespace).Create(ctx, ds, dryRun)
		took = append(took, time.Since(start))
		if err != nil {
			t.Fatalf("dry-run create: %v", err)
		}
		if len(out.Spec.Template.Spec.Tolerations) == 0 {
			t.Fatalf("the dry-run create came back without daemonguard's injection: %+v", out.Spec.Template.Spec)
		}
	}
	slices.Sort(took)
	return took[len(took)/2], took[min(len(took)-1, len(took)*99/100)]
}

// rollOut sets the image of the platform DaemonSet name, waits until it runs on every node and
// returns how long that took and what it cost the control plane and the processes procs (name →
// PID).
func rollOut(t testing.TB, c *localcluster.Cluster, procs map[string]int, name, image string, nodes int, managed bool) (time.Duration, RolloutCost) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":%q}]}}}}`, image)
	before := controlPlaneCounters(t, c)
	cpu := map[string]time.Duration{}
	for proc, pid := range procs {
		cpu[proc] = clustertest.CPUTime(pid)
	}
	start := time.Now()
	if _, err := c.Client.AppsV1().DaemonSets(platformNamespace).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDaemonSet(t, c, name, nodes, image, managed, 60*time.Minute)
	took := time.Since(start)
	cost := controlPlaneCounters(t, c).since(before)
	cost.CPUSeconds = map[string]float64{}
	for proc, pid := range procs {
		cost.CPUSeconds[proc] = (clustertest.CPUTime(pid) - cpu[proc]).Seconds()
	}
	ds, err := c.Client.AppsV1().DaemonSets(platformNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods(platformNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil {
		t.Fatal(err)
	}
	var counted int
	cost.ReadyP50Seconds, cost.ReadyP99Seconds, counted = readyAfterScheduled(pods.Items, image)
	if counted < nodes {
		t.Errorf("%d of the %d new pods of %s have the times of their scheduling and readiness", counted, nodes, name)
	}
	return took, cost
}

// controlPlaneCounters reads the counters a RolloutCost is the difference of: kube-controller-manager's
// DaemonSet workqueue (each item processed is one sync of one DaemonSet) and the API server's
// answers to DaemonSet writes.
func controlPlaneCounters(t testing.TB, c *localcluster.Cluster) RolloutCost {
	t.Helper()
	body, err := c.ControllerManagerMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	kcm := metricFamilies(t, body)
	var out RolloutCost
	for _, m := range kcm["workqueue_work_duration_seconds"].GetMetric() {
		if label(m, "name") == "daemonset" {
			out.DaemonSetSyncs = int(m.GetHistogram().GetSampleCount())
			out.DaemonSetSyncSeconds = m.GetHistogram().GetSampleSum()
		}
	}
	for _, m := range apiServerMetrics(t, c)["apiserver_request_total"].GetMetric() {
		if label(m, "resource") != "daemonsets" || (label(m, "verb") != "PATCH" && label(m, "verb") != "UPDATE") {
			continue
		}
		n := int(m.GetCounter().GetValue())
		out.DaemonSetWrites += n
		if label(m, "code") == "409" {
			out.Conflicts += n
		}
	}
	return out
}

func (c RolloutCost) since(before RolloutCost) RolloutCost {
	return RolloutCost{
		DaemonSetSyncs:       c.DaemonSetSyncs - before.DaemonSetSyncs,
		DaemonSetSyncSeconds: c.DaemonSetSyncSeconds - before.DaemonSetSyncSeconds,
		DaemonSetWrites:      c.DaemonSetWrites - before.DaemonSetWrites,
		Conflicts:            c.Conflicts - before.Conflicts,
	}
}

// label is the value of the metric's label name, "" without one.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// plannedDaemonSets are the two plans measured: the built-in RollingUpdate DaemonSet, and the managed one.
var plannedDaemonSets = []struct{ kind, daemonSet string }{{"rolling-update", builtinAgent}, {"managed", managedAgent}}

// measurePlan runs `daemonguard rollout plan` (binary bin) as the chart's pre-flight identity for
// an image change of the platform DaemonSet name, and returns its wall time, the API requests it
// made and its peak RSS.
func measurePlan(t testing.TB, r *release, bin, kind, name string) Plan {
	t.Helper()
	ctx := context.Background()
	ds, err := r.Cluster.Client.AppsV1().DaemonSets(platformNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.ManagedFields, ds.ResourceVersion, ds.UID, ds.Status = nil, "", "", appsv1.DaemonSetStatus{}
	ds.APIVersion, ds.Kind = "apps/v1", "DaemonSet" // a typed client's objects carry no type
	ds.Spec.Template.Spec.Containers[0].Image = "agent:plan"
	data, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ds.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := r.Cluster.ServiceAccountKubeconfig(ctx, r.Namespace, planIdentity)
	if err != nil {
		t.Fatal(err)
	}
	before := planRequests(t, r.Cluster)
	apiServer := clusterProcesses(r.Cluster)["kube-apiserver"]
	apiServerCPU := clustertest.CPUTime(apiServer)
	cmd := exec.Command(bin, "rollout", "plan", "-f", file, "-o", "json", "--kubeconfig", kubeconfig, "--daemonguard-namespace", r.Namespace)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	apiServerCPU = clustertest.CPUTime(apiServer) - apiServerCPU
	if code := cli.ExitCode(err); code != 0 && code != 3 {
		t.Fatalf("rollout plan exited %d (%v): %s", code, err, stderr.String())
	}
	var doc struct {
		Items []struct {
			Plan *struct {
				Summary struct{ Replaced int } `json:"summary"`
			} `json:"plan"`
		} `json:"items"`
	}
	if err := json.Unmarshal(out, &doc); err != nil || len(doc.Items) != 1 || doc.Items[0].Plan == nil {
		t.Fatalf("the plan is not one DaemonSet's plan (%v): %.2000s", err, out)
	}
	requests := planRequests(t, r.Cluster) - before
	rss := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss) / 1024 // kB on Linux
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return Plan{DaemonSet: kind, WallSeconds: wall.Seconds(), Requests: requests, PeakRSSMiB: rss,
		CPUSeconds: cpu.Seconds(), APIServerCPUSeconds: apiServerCPU.Seconds()}
}

// clusterProcesses are the PIDs of the cluster's processes by the names /proc/PID/comm gives them
// ("kube-apiserver", "kube-controller" (sic: 15 characters), "etcd", "kwok", ...).
func clusterProcesses(c *localcluster.Cluster) map[string]int {
	procs := map[string]int{}
	for _, pid := range c.PIDs() {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
			procs[strings.TrimSpace(string(comm))] = pid
		}
	}
	return procs
}

// planResources are what the plan reads. Nothing else in the cluster GETs or LISTs them while it
// runs (the controllers and kwok watch), so the API server's counts of those requests are the
// plan's; so is a watch-list of pods (the plan streams the pods through one; the components
// start theirs when they start).
var planResources = []string{"nodes", "pods", "namespaces", "poddisruptionbudgets", "priorityclasses", "daemonsets",
	"controllerrevisions", "mutatingwebhookconfigurations", "validatingwebhookconfigurations", "configmaps"}

// planRequests is the API server's count of GET and LIST requests of planResources, and of
// watch-lists of pods, so far.
func planRequests(t testing.TB, c *localcluster.Cluster) int {
	t.Helper()
	families := apiServerMetrics(t, c)
	total := 0.0
	for _, m := range families["apiserver_request_total"].GetMetric() {
		if verb := label(m, "verb"); (verb == "GET" || verb == "LIST") && slices.Contains(planResources, label(m, "resource")) {
			total += m.GetCounter().GetValue()
		}
	}
	for _, m := range families["apiserver_watch_list_duration_seconds"].GetMetric() {
		if label(m, "resource") == "pods" {
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return int(total)
}

// webhookFailures is the API server's count of admission webhook calls that failed: rejected
// with an error, or failed open (a pod webhook with failurePolicy Ignore that timed out).
func webhookFailures(t testing.TB, c *localcluster.Cluster) int {
	t.Helper()
	families := apiServerMetrics(t, c)
	total := 0.0
	for _, m := range families["apiserver_admission_webhook_fail_open_count"].GetMetric() {
		total += m.GetCounter().GetValue()
	}
	for _, m := range families["apiserver_admission_webhook_rejection_count"].GetMetric() {
		if errorType := label(m, "error_type"); errorType != "" && errorType != "no_error" {
			total += m.GetCounter().GetValue()
		}
	}
	return int(total)
}

func apiServerMetrics(t testing.TB, c *localcluster.Cluster) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return metricFamilies(t, body)
}

// metricFamilies parses a /metrics answer in Prometheus' text format.
func metricFamilies(t testing.TB, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	return families
}

// measureJoinStorm adds n nodes at once: every platform DaemonSet creates a pod on each, through the pod
// webhook. It returns how long until every DaemonSet is available on all nodes, how many pods were
// created for the new nodes, and how many creations failed (FailedCreate Events, failed webhook
// calls).
func measureJoinStorm(t testing.TB, c *localcluster.Cluster, existing, n int) (took time.Duration, pods, failed int) {
	t.Helper()
	ctx := context.Background()
	failuresBefore := webhookFailures(t, c)
	start := time.Now()
	nodes := localcluster.WorkerNodes("join", n)
	for i := range nodes {
		nodes[i].Labels[localcluster.ZoneLabel] = fmt.Sprintf("zone-%c", 'a'+i%zones)
	}
	if err := c.AddNodes(ctx, nodes...); err != nil {
		t.Fatal(err)
	}
	for _, a := range agents {
		waitDaemonSet(t, c, a.name, existing+n, imageOf(t, c, a.name), false, 30*time.Minute)
	}
	took = time.Since(start)
	events, err := c.Client.CoreV1().Events(platformNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=FailedCreate"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.LastTimestamp.After(start) || e.EventTime.After(start) {
			failed += int(max(1, e.Count))
		}
	}
	return took, n * len(agents), failed + webhookFailures(t, c) - failuresBefore
}

func imageOf(t testing.TB, c *localcluster.Cluster, name string) string {
	t.Helper()
	ds, err := c.Client.AppsV1().DaemonSets(platformNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds.Spec.Template.Spec.Containers[0].Image
}
