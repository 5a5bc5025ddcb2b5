package rolloutbench

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// readyDelay is how long kwok's fake kubelet takes to report a new pod Ready; both rollouts pay it
// once per wave, so the ideal wall time is ceil(N / budget) × readyDelay.
const readyDelay = 2 * time.Second

// idleWindow is how long the benchmark measures the control plane's CPU with nothing rolling.
const idleWindow = 10 * time.Second

func daemonSet(managed bool) string {
	strategy := "updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: \"10%\"}}"
	annotations := "{}"
	if managed {
		strategy = "updateStrategy: {type: OnDelete}"
		annotations = `{daemonguard.io/rollout: managed, daemonguard.io/max-unavailable: "10%"}`
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, annotations: %s}
spec:
  %s
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: "agent:1"}]
`, annotations, strategy)
}

// BenchmarkRolloutVsBuiltin measures, in one run per cluster size, the wall time of a managed
// rollout and of the built-in RollingUpdate of an identical DaemonSet with the same budget (10%),
// their ratio, the ideal, and the peak RSS of the controller process. Run it once per size:
//
//	go test -run '^$' -bench RolloutVsBuiltin -benchtime 1x -timeout 60m ./test/rolloutbench/
func BenchmarkRolloutVsBuiltin(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				runOnce(b, n)
			}
		})
	}
}

func runOnce(b *testing.B, n int) {
	ctx := context.Background()
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: localcluster.WorkerNodes("node", n), PodReadyDelay: readyDelay, StartTimeout: 15 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Stop()

	pid := startControllerProcess(b, c)
	for _, ns := range []string{"builtin", "managed"} {
		if err := c.CreateNamespace(ctx, ns); err != nil {
			b.Fatal(err)
		}
		clustertest.Kubectl(b, c, daemonSet(ns == "managed"), "apply", "-n", ns, "-f", "-")
	}
	for _, ns := range []string{"builtin", "managed"} {
		waitRolledOut(b, c, ns, n, "agent:1", false)
	}

	// CPU accounting: the control plane's components, the controller, this process, the machine.
	pids := map[string]int{"daemonguard controller": pid, "benchmark (timeline, polling)": os.Getpid()}
	var procs []string
	for _, p := range c.PIDs() {
		procs = append(procs, processName(p))
		pids[processName(p)] = p
	}
	procs = append(procs, "daemonguard controller", "benchmark (timeline, polling)")

	// The control plane's load with nothing rolling (kwok's node heartbeats, leases, the
	// controllers' resyncs), per second: what a rollout's own work is measured above.
	idleStart, idleFrom := sampleCPU(pids), time.Now()
	time.Sleep(idleWindow) // a measurement window, not a wait for a condition
	idle := usageBetween(idleStart, sampleCPU(pids), time.Since(idleFrom))
	controlPlane := make([]string, 0, len(c.PIDs()))
	for _, p := range c.PIDs() {
		controlPlane = append(controlPlane, processName(p))
	}

	budget := int(math.Ceil(float64(n) * 0.1))
	wall := map[string]time.Duration{}
	var steps []phases
	var cpu []cpuUsage
	var requests []requestCounts
	for _, ns := range []string{"builtin", "managed"} {
		tl, err := startTimeline(c.Client, ns)
		if err != nil {
			b.Fatal(err)
		}
		before, requestsBefore := sampleCPU(pids), sampleRequests(ctx, c.Client)
		start := time.Now()
		clustertest.Kubectl(b, c, "", "set", "image", "-n", ns, "ds/agent", "agent=agent:2")
		waitRolledOut(b, c, ns, n, "agent:2", ns == "managed")
		done := time.Now()
		wall[ns] = done.Sub(start)
		cpu = append(cpu, usageBetween(before, sampleCPU(pids), wall[ns]))
		requests = append(requests, requestsBefore.delta(sampleRequests(ctx, c.Client)))
		close(tl.stop)
		steps = append(steps, tl.analyze(start, done, "agent:1", "agent:2", budget))
	}
	rss := peakRSS(pid)
	ideal := time.Duration(math.Ceil(float64(n)/float64(budget))) * readyDelay
	// The breakdown is longer than the 10 lines a benchmark's log keeps: print it whole.
	fmt.Printf("--- %s: %d nodes, budget %d: built-in %s, managed %s, ideal %s\n%s", b.Name(), n, budget,
		wall["builtin"].Round(100*time.Millisecond), wall["managed"].Round(100*time.Millisecond), ideal, phaseTable([]string{"built-in", "managed"}, steps)+cpuTable([]string{"built-in", "managed"}, procs, cpu)+
			requestTable([]string{"built-in", "managed"}, requests, float64(n)/20)+
			floorTable([]string{"built-in", "managed"}, controlPlane, idle, cpu, ideal))
	b.ReportMetric(wall["builtin"].Seconds(), "builtin-s")
	b.ReportMetric(wall["managed"].Seconds(), "managed-s")
	b.ReportMetric(wall["managed"].Seconds()/wall["builtin"].Seconds(), "managed/builtin")
	b.ReportMetric(wall["managed"].Seconds()/ideal.Seconds(), "managed/ideal")
	b.ReportMetric(ideal.Seconds(), "ideal-s")
	b.ReportMetric(floorOf(controlPlane, idle, cpu[0]).seconds()/ideal.Seconds(), "builtin-cpu-floor/ideal")
	b.ReportMetric(floorOf(controlPlane, idle, cpu[1]).seconds()/ideal.Seconds(), "managed-cpu-floor/ideal")
	b.ReportMetric(float64(rss)/(1<<20), "controller-peak-RSS-MiB")
}

// startControllerProcess runs the real `daemonguard controller` binary, so its RSS is its own. It
// builds the binary from this checkout, or runs $ROLLOUTBENCH_BINARY (to compare two builds on
// the same machine, interleaved).
func startControllerProcess(b *testing.B, c *localcluster.Cluster) int {
	bin := os.Getenv("ROLLOUTBENCH_BINARY")
	if bin == "" {
		root, err := toolbin.RepoRoot()
		if err != nil {
			b.Fatal(err)
		}
		bin = filepath.Join(b.TempDir(), "daemonguard")
		build := exec.Command("go", "build", "-o", bin, "./cmd/daemonguard")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("build: %v\n%s", err, out)
		}
	}
	logFile, err := os.Create(filepath.Join(c.Dir, "logs", "daemonguard-controller.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "controller", "--kubeconfig", c.KubeconfigPath, "--leader-elect=false",
		"--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logFile.Close() })
	return cmd.Process.Pid
}

func waitRolledOut(b *testing.B, c *localcluster.Cluster, ns string, n int, image string, managed bool) {
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s := ds.Status
		last = fmt.Sprintf("%+v", s)
		done := ds.Spec.Template.Spec.Containers[0].Image == image && s.ObservedGeneration == ds.Generation &&
			s.DesiredNumberScheduled == int32(n) && s.UpdatedNumberScheduled == int32(n) && s.NumberAvailable == int32(n)
		if done && managed {
			done = hasTrue(ds, rolloutapi.ConditionComplete)
		}
		return done, nil
	})
	if err != nil {
		b.Fatalf("%s did not roll out %s: %v (last %s)", ns, image, err, last)
	}
}

func hasTrue(ds *appsv1.DaemonSet, t appsv1.DaemonSetConditionType) bool {
	for _, c := range ds.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func peakRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
