package rolloutbench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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

// daemonSet is the benchmark's DaemonSet: with annotations nil, the built-in RollingUpdate with
// maxUnavailable 10%; else OnDelete, with the annotations (daemonguard's settings).
func daemonSet(annotations map[string]string) string {
	strategy := "updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: \"10%\"}}"
	meta := "{}"
	if annotations != nil {
		strategy = "updateStrategy: {type: OnDelete}"
		data, err := json.Marshal(annotations) // JSON is YAML, and quotes a gate's query for us
		if err != nil {
			panic(err) // a map of strings always marshals
		}
		meta = string(data)
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
`, meta, strategy)
}

// managedSettings are the annotations of a managed rollout with the built-in one's budget (10%),
// and extra ones (key, value, ...).
func managedSettings(extra ...string) map[string]string {
	a := map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged, rolloutapi.AnnotationMaxUnavailable: "10%"}
	for i := 0; i+1 < len(extra); i += 2 {
		a[extra[i]] = extra[i+1]
	}
	return a
}

// rollout is one DaemonSet the benchmark rolls out from agent:1 to agent:2, in a namespace of
// its own.
type rollout struct {
	ns, title   string
	annotations map[string]string // nil: the built-in RollingUpdate
}

func (r rollout) managed() bool { return r.annotations != nil }

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
	c := startCluster(b, n)
	defer c.Stop()
	pid := startControllerProcess(b, c)
	rollouts := []rollout{{ns: "builtin", title: "built-in"}, {ns: "managed", title: "managed", annotations: managedSettings()}}
	bn := newBench(b, c, n, pid, nil, rollouts)
	idle := bn.measureIdle()

	wall := map[string]time.Duration{}
	var steps []phases
	var cpu []cpuUsage
	var requests []requestCounts
	for _, r := range rollouts {
		res := bn.roll(b, r)
		wall[r.ns] = res.wall
		steps, cpu, requests = append(steps, res.phases), append(cpu, res.cpu), append(requests, res.requests)
	}
	rss := clustertest.MemoryKiB(pid, "VmHWM") << 10
	ideal := bn.ideal()
	controlPlane := bn.controlPlane
	// The breakdown is longer than the 10 lines a benchmark's log keeps: print it whole.
	fmt.Printf("--- %s: %d nodes, budget %d: built-in %s, managed %s, ideal %s\n%s", b.Name(), n, bn.budget,
		wall["builtin"].Round(100*time.Millisecond), wall["managed"].Round(100*time.Millisecond), ideal, phaseTable([]string{"built-in", "managed"}, steps)+cpuTable([]string{"built-in", "managed"}, bn.procs, cpu)+
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

// startCluster starts a local control plane of n kwok nodes whose pods turn Ready readyDelay
// after they are bound; the caller stops it.
func startCluster(b *testing.B, n int) *localcluster.Cluster {
	c, err := localcluster.Start(context.Background(), localcluster.Config{Nodes: localcluster.WorkerNodes("node", n), PodReadyDelay: readyDelay, StartTimeout: 15 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// process is a process of the benchmark's CPU accounting other than the control plane's, the
// controller and the benchmark itself.
type process struct {
	name string
	pid  int
}

// bench is one cluster of n nodes with the controller running, its DaemonSets deployed, and the
// processes whose CPU time it accounts.
type bench struct {
	c         *localcluster.Cluster
	n, budget int
	// pids are the processes of the CPU accounting by CPU table row; procs the rows in order.
	pids  map[string]int
	procs []string
	// controlPlane are the control plane's processes, whose idle load the CPU floor takes out.
	controlPlane []string
}

// newBench creates a namespace and a DaemonSet at agent:1 per rollout, waits until each runs on
// every node, and sets up the CPU accounting: the control plane, the other processes, the
// controller (PID controller) and the benchmark's own process.
func newBench(b *testing.B, c *localcluster.Cluster, n, controller int, others []process, rollouts []rollout) *bench {
	ctx := context.Background()
	for _, r := range rollouts {
		if err := c.CreateNamespace(ctx, r.ns); err != nil {
			b.Fatal(err)
		}
		clustertest.Kubectl(b, c, daemonSet(r.annotations), "apply", "-n", r.ns, "-f", "-")
	}
	for _, r := range rollouts {
		waitRolledOut(b, c, r.ns, n, "agent:1", false)
	}
	bn := &bench{c: c, n: n, budget: int(math.Ceil(float64(n) * 0.1)), pids: map[string]int{}}
	for _, p := range c.PIDs() {
		name := processName(p)
		bn.procs, bn.controlPlane = append(bn.procs, name), append(bn.controlPlane, name)
		bn.pids[name] = p
	}
	for _, p := range others {
		bn.procs = append(bn.procs, p.name)
		bn.pids[p.name] = p.pid
	}
	bn.procs = append(bn.procs, "daemonguard controller", "benchmark (timeline, polling)")
	bn.pids["daemonguard controller"], bn.pids["benchmark (timeline, polling)"] = controller, os.Getpid()
	return bn
}

// measureIdle measures the control plane's load with nothing rolling (kwok's node heartbeats,
// leases, the controllers' resyncs): what a rollout's own work is measured above.
func (bn *bench) measureIdle() cpuUsage {
	start, from := sampleCPU(bn.pids), time.Now()
	time.Sleep(idleWindow) // a measurement window, not a wait for a condition
	return usageBetween(start, sampleCPU(bn.pids), time.Since(from))
}

// ideal is ceil(N / budget) × readyDelay: every wave replaced in no time but kwok's readiness
// delay.
func (bn *bench) ideal() time.Duration {
	return time.Duration(math.Ceil(float64(bn.n)/float64(bn.budget))) * readyDelay
}

// result is what the benchmark measured of one rollout.
type result struct {
	start, done time.Time
	wall        time.Duration
	cpu         cpuUsage
	requests    requestCounts
	phases      phases
	timeline    *timeline // stopped; what it saw stays for further analysis
}

// roll rolls r out from agent:1 to agent:2 and measures it: wall time from `kubectl set image`
// until the DaemonSet reports every pod updated and available (and a managed one Complete), the
// pods' timeline, the CPU time of every accounted process and the API requests.
func (bn *bench) roll(b *testing.B, r rollout) result {
	ctx := context.Background()
	tl, err := startTimeline(bn.c.Client, r.ns)
	if err != nil {
		b.Fatal(err)
	}
	before, requestsBefore := sampleCPU(bn.pids), sampleRequests(ctx, bn.c.Client)
	res := result{start: time.Now(), timeline: tl}
	clustertest.Kubectl(b, bn.c, "", "set", "image", "-n", r.ns, "ds/agent", "agent=agent:2")
	waitRolledOut(b, bn.c, r.ns, bn.n, "agent:2", r.managed())
	res.done = time.Now()
	res.wall = res.done.Sub(res.start)
	res.cpu = usageBetween(before, sampleCPU(bn.pids), res.wall)
	res.requests = requestsBefore.delta(sampleRequests(ctx, bn.c.Client))
	close(tl.stop)
	res.phases = tl.analyze(res.start, res.done, "agent:1", "agent:2", bn.budget)
	return res
}

// startControllerProcess runs the real `daemonguard controller` binary, so its RSS is its own. It
// builds the binary from this checkout, or runs $ROLLOUTBENCH_BINARY (to compare two builds on
// the same machine, interleaved), with the benchmark's flags and then args.
func startControllerProcess(b *testing.B, c *localcluster.Cluster, args ...string) int {
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
	cmd.Args = append(cmd.Args, args...) // later flags win
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logFile.Close() })
	return cmd.Process.Pid
}

// waitRolledOut waits until the DaemonSet agent of ns runs image on every one of the n nodes
// (clustertest.RolledOut), polled every 100 ms: the rollout's wall time ends when it returns.
func waitRolledOut(b *testing.B, c *localcluster.Cluster, ns string, n int, image string, managed bool) {
	b.Helper()
	clustertest.PollDaemonSet(b, c, ns, "agent", 100*time.Millisecond, 30*time.Minute, ns+" rolls out "+image, clustertest.RolledOut(image, n, managed))
}
