package planbench

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/internal/preflight"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// nodeCount is how many workers the cluster has (-args -nodes N): 1,000 by default; the plan's
// target is 10 s on 5,000. otherPodsPerNode is how many other pods each runs (-args -other-pods
// N): 2 by default; 26 gives the scale benchmark's 30 pods per node.
var nodeCount, otherPodsPerNode = 1000, 2

func init() {
	flag.IntVar(&nodeCount, "nodes", nodeCount, "kwok worker nodes of the benchmark's cluster")
	flag.IntVar(&otherPodsPerNode, "other-pods", otherPodsPerNode, "pods per node besides the two DaemonSets' and the low-priority ones")
}

// The cluster the plans run against: nodeCount workers over three zones, each running both
// DaemonSets' pods and otherPodsPerNode other pods; every fullEvery-th node also runs a
// low-priority pod that leaves no room for a new daemon pod, which the plan then preempts.
const (
	fullEvery      = 10
	benchNamespace = "bench"
	workNamespace  = "workload"
	lowPriority    = "bench-low"
)

// managedSteps are the managed DaemonSet's steps: a canary node, 10%, a timed pause, the rest,
// with the default budget of one node at a time. That is the forecast's most expensive shape: the
// controller's planner runs about twice per node.
const managedSteps = "1,10%,pause:5m,100%"

// daemonSet is a node agent asking for a little CPU and memory, so every new pod's fit is
// computed against the node's other pods.
func daemonSet(name, image string, managed bool) string {
	strategy := "updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: \"10%\"}}"
	annotations := "{}"
	if managed {
		strategy = "updateStrategy: {type: OnDelete}"
		annotations = fmt.Sprintf("{daemonguard.io/rollout: managed, daemonguard.io/steps: %q}", managedSteps)
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: %s, namespace: %s, annotations: %s}
spec:
  %s
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers:
      - name: agent
        image: %q
        resources: {requests: {cpu: 100m, memory: 64Mi}}
`, name, benchNamespace, annotations, strategy, name, name, image)
}

// BenchmarkPlan times `daemonguard rollout plan -f FILE -o json` through the CLI's cobra command,
// in this process, on 1,000 kwok nodes (-nodes) with daemonguard's webhooks registered: the plan of an
// image change of a RollingUpdate DaemonSet, and of a managed one. Each sub-benchmark reports the
// median wall time of its runs, the median time the API server spent on the plan's reads
// (apiserver_request_duration_seconds of its LIST and GET requests; the rest is the CLI's own
// work: decoding, admission, the plan, the rendering) and the median CPU time of this process
// during a run. Run it with a fixed count:
//
//	go test -run '^$' -bench Plan -benchtime 5x -timeout 30m ./test/planbench/
//	go test -run '^$' -bench Plan -benchtime 5x -timeout 60m ./test/planbench/ -args -nodes 5000
func BenchmarkPlan(b *testing.B) {
	localcluster.NeedCluster(b) // -short runs the benchmarks that need no cluster
	ctx := context.Background()
	// Node leases of 10 minutes, as the scale benchmark's: at 5,000 nodes on 2 cores, kwok renewing
	// every 10 s falls behind, the node lifecycle controller marks nodes NotReady, and their pods
	// stay not Ready after the nodes return.
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: localcluster.WorkerNodes("node", nodeCount), StartTimeout: seedTimeout(),
		NodeLeaseDuration: 10 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()
	w, err := harness.StartWebhook(ctx, c, harness.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop()
	seed(b, c)

	for _, tc := range []struct {
		name    string
		ds      string
		managed bool
	}{
		{name: "rolling-update", ds: "rolling", managed: false},
		{name: "managed", ds: "managed", managed: true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			file := filepath.Join(b.TempDir(), "ds.yaml")
			if err := os.WriteFile(file, []byte(daemonSet(tc.ds, "agent:2", tc.managed)), 0o600); err != nil {
				b.Fatal(err)
			}
			var walls, api, cpus []time.Duration
			var requests float64
			for range b.N {
				before := readDurations(ctx, b, c.Client)
				start, startCPU := time.Now(), processCPU(b)
				out := plan(ctx, b, c.KubeconfigPath, file)
				walls = append(walls, time.Since(start))
				cpus = append(cpus, processCPU(b)-startCPU)
				spent, n := readDurations(ctx, b, c.Client).since(before)
				api, requests = append(api, spent), n
				check(b, out, tc.managed)
			}
			wall, server, cpu := median(walls), median(api), median(cpus)
			fmt.Printf("--- %s: %d nodes, %d pods: plan %s (runs %s), of which the API server %s over %.0f requests, the CLI %s; CPU of this process %s\n",
				b.Name(), nodeCount, nodeCount*(2+otherPodsPerNode)+nodeCount/fullEvery, wall.Round(time.Millisecond), rounded(walls),
				server.Round(time.Millisecond), requests, (wall - server).Round(time.Millisecond), cpu.Round(time.Millisecond))
			b.ReportMetric(wall.Seconds(), "median-s")
			b.ReportMetric(server.Seconds(), "apiserver-s")
			b.ReportMetric((wall - server).Seconds(), "cli-s")
			b.ReportMetric(cpu.Seconds(), "cpu-s")
		})
	}
}

// plan runs the command as a user would, and returns its JSON output. Exit status 3 is expected:
// the new pods preempt the low-priority pods of the full nodes.
func plan(ctx context.Context, b *testing.B, kubeconfig, file string) []byte {
	cmd := cli.New()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"rollout", "plan", "-f", file, "-o", "json", "--kubeconfig", kubeconfig, "--daemonguard-namespace", harness.WebhookNamespace})
	if code := cli.ExitCode(cmd.ExecuteContext(ctx)); code != 3 {
		b.Fatalf("rollout plan exited %d, want 3 (some new pods preempt): %s", code, errOut.String())
	}
	return out.Bytes()
}

// check holds the benchmark to plans that answer the question: every node replaced, the full
// nodes' low-priority pods preempted, and for the managed DaemonSet a forecast that completes.
func check(b *testing.B, out []byte, managed bool) {
	var doc struct {
		Items []preflight.Report `json:"items"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		b.Fatalf("decode the plan: %v", err)
	}
	if len(doc.Items) != 1 || doc.Items[0].Plan == nil {
		b.Fatalf("want one plan, got %.2000s", out)
	}
	p := doc.Items[0].Plan
	if s := p.Summary; s.Replaced != nodeCount || s.Preempting != nodeCount/fullEvery || s.NotFit != 0 {
		b.Fatalf("summary %+v, want %d replaced and %d preempting", s, nodeCount, nodeCount/fullEvery)
	}
	if managed {
		f := p.Rollout.Managed
		if f == nil || !f.Complete || len(f.Waves) != nodeCount || len(f.Pauses) != 1 {
			b.Fatalf("managed rollout %s, want a complete forecast of %d waves and one pause", p.Rollout.Summary, nodeCount)
		}
	}
}

// seed creates what the plans read: the low priority class, the two DaemonSets at agent:1 (by
// kubectl apply, so they carry the last-applied annotation the plan merges with), and, once
// their pods run, the other pods, bound to their nodes directly so the scheduler does not preempt
// the low-priority ones for the daemon pods.
func seed(b *testing.B, c *localcluster.Cluster) {
	ctx := context.Background()
	if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: lowPriority}, Value: -10}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{benchNamespace, workNamespace} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			b.Fatal(err)
		}
	}
	for _, name := range []string{"rolling", "managed"} {
		clustertest.Kubectl(b, c, daemonSet(name, "agent:1", name == "managed"), "apply", "-f", "-")
	}
	for _, name := range []string{"rolling", "managed"} {
		clustertest.WaitDaemonSet(b, c, benchNamespace, name, seedTimeout(), "DaemonSet "+name+" running on every node", func(ds *appsv1.DaemonSet) (bool, string) {
			s := ds.Status
			return s.DesiredNumberScheduled == int32(nodeCount) && s.NumberAvailable == int32(nodeCount) && s.UpdatedNumberScheduled == int32(nodeCount), fmt.Sprintf("%+v", s)
		})
	}

	var pods []*corev1.Pod
	for i := range nodeCount {
		node := fmt.Sprintf("node-%d", i)
		for j := range otherPodsPerNode {
			pods = append(pods, workload(fmt.Sprintf("app-%d-%d", i, j), node, "250m", ""))
		}
		if i%fullEvery == 0 {
			// Fills the node: its 1k CPUs minus what the daemon pods (0.1 each) and the other
			// pods (0.25 each) ask, and 0.1 more, so a replaced daemon pod fits only by
			// preempting it.
			batch := 1_000_000 - 2*100 - otherPodsPerNode*250 + 100
			pods = append(pods, workload(fmt.Sprintf("batch-%d", i), node, fmt.Sprintf("%dm", batch), lowPriority))
		}
	}
	createAll(b, c.Client, pods)
	c.WaitFor(b, seedTimeout(), "the other pods running", func(ctx context.Context) (bool, string) {
		list, err := c.Client.CoreV1().Pods(workNamespace).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Running"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == len(pods), fmt.Sprintf("%d of %d running", len(list.Items), len(pods))
	})
}

// seedTimeout is how long a step of seed may take: 15 minutes for 1,000 nodes, on a loaded
// 2-core machine; more in proportion beyond.
func seedTimeout() time.Duration {
	return max(15*time.Minute, time.Duration(nodeCount)*15*time.Minute/1000)
}

func workload(name, node, cpu, priorityClass string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workNamespace},
		Spec: corev1.PodSpec{
			NodeName:          node,
			PriorityClassName: priorityClass,
			Containers: []corev1.Container{{Name: "app", Image: "app:1", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi"),
			}}}},
		},
	}
}

// createAll creates the pods with a few concurrent clients: one at a time, 2,100 creates take
// longer than the whole benchmark.
func createAll(b *testing.B, client kubernetes.Interface, pods []*corev1.Pod) {
	const workers = 16
	work := make(chan *corev1.Pod)
	errs := make(chan error, len(pods))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for p := range work {
				_, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
				errs <- err
			}
		})
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatalf("create pod: %v", err)
		}
	}
}

// planReads are the resources the plan reads, with LIST or GET: every request the API server
// counts for them during a run is the plan's (the controllers and kwok watch them instead). The
// pods it streams with a watch-list, timed apart (apiserver_watch_list_duration_seconds).
var planReads = map[string]bool{
	"nodes": true, "pods": true, "priorityclasses": true, "namespaces": true, "daemonsets": true, "configmaps": true,
	"mutatingwebhookconfigurations": true, "validatingwebhookconfigurations": true,
}

// durations are the API server's time (sum) and count of the plan's requests: GETs and LISTs of
// planReads and its watch-list of pods.
type durations struct{ seconds, count float64 }

func readDurations(ctx context.Context, b *testing.B, c kubernetes.Interface) durations {
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		b.Fatalf("read the API server's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatalf("parse the API server's metrics: %v", err)
	}
	var d durations
	// The plan's GETs and LISTs of planReads, and its watch-list of pods (one family each).
	reads := map[string]func(l map[string]string) bool{
		"apiserver_request_duration_seconds": func(l map[string]string) bool {
			return (l["verb"] == "LIST" || l["verb"] == "GET") && planReads[l["resource"]] && l["subresource"] == ""
		},
		"apiserver_watch_list_duration_seconds": func(l map[string]string) bool { return l["resource"] == "pods" },
	}
	for family, planned := range reads {
		for _, m := range families[family].GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if planned(l) {
				d.seconds += m.GetHistogram().GetSampleSum()
				d.count += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return d
}

func (d durations) since(before durations) (time.Duration, float64) {
	return time.Duration((d.seconds - before.seconds) * float64(time.Second)), d.count - before.count
}

// processCPU is this process's user and system CPU time so far. The plan runs in this process, so
// the difference over a run is its CPU (the idle webhook server beside it adds little), which holds
// still when other work on the machine slows the wall time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rounded(ds []time.Duration) string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Round(10 * time.Millisecond).String()
	}
	return strings.Join(out, ", ")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
