package scalebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// The cluster settings that keep a 2-core control plane breathing at 5,000 nodes; settings lists
// them beside the results.
const (
	// leaseDuration: each fake node renews its lease every 150 s instead of every 10 s.
	leaseDuration = 10 * time.Minute
	// readyDelay is how long kwok's fake kubelet takes to report a pod Ready, as in the rollout
	// benchmark: both rollouts pay it once per wave.
	readyDelay = 2 * time.Second
	// auditInterval: the pass measured is a replica's first; no second one runs while its Events
	// are counted.
	auditInterval = 2 * time.Hour
)

func settings(s shape) []string {
	return []string{
		fmt.Sprintf("kwok nodes over %d zones; node leases of %s (renewed every %s), node status every 10-20 min; the node lifecycle controller's grace period %s",
			zones, leaseDuration, leaseDuration/4, leaseDuration+leaseDuration/4),
		fmt.Sprintf("%d pods per node: %d platform DaemonSets (priority class platform-agent, 50m CPU / 64Mi) and %d workload pods in %d namespaces, in workloads of %d pods with a PodDisruptionBudget each (priority classes service, batch or none)",
			s.podsPerNode, len(agents), s.podsPerNode-len(agents), teams, groupSize),
		"the workload pods are created by the benchmark, bound to their nodes, without a ReplicaSet, and stay Pending (kwok does not start them): on 2 cores the scheduler binding 130,000 pods, a ReplicaSet controller adopting them (a write per pod, and a pass over the namespace's pods on each change) and kwok starting them (a status write and an IP each; at 5,000 nodes kwok's IP allocation failed for 17,000 of them) take longer than every measurement. daemonguard's controller skips them either way, and the plan counts a bound pod's requests whatever its phase",
		fmt.Sprintf("DaemonSet pods turn Ready %s after they are bound (kwok); rollouts with maxUnavailable %s", readyDelay, budget),
		"daemonguard installed by its chart (helm, URL mode, self-managed TLS, OpenReports on); webhook and controller run on the host as the real binary with the chart's arguments and ServiceAccounts; one replica each",
		fmt.Sprintf("%d more DaemonSets for the audit, over the workload namespaces, select no node; every tenth asks for maxUnavailable 40%%, which admission allows, and before the audit a policy ConfigMap lowers rolling_update_budget's maximum to %d%%, so the audit finds them in violation", s.auditDaemonSets, tightenedBudget),
		fmt.Sprintf("the audit is measured last, with kube-controller-manager stopped: the audited DaemonSets are created once everything else is measured, and a second webhook replica, started once they exist, runs the pass measured as it starts (interval %s, the chart's default is 5m). On 2 cores the DaemonSet controller's first syncs of 2,000 DaemonSets (each checks every node: about 40 a minute at 5,500 nodes), or an audit pass, beside another measurement take the CPU it needs, where in a cluster they have nodes of their own; the audit reads the DaemonSets' specs, not their status", auditInterval),
		"plans run as the chart's pre-flight identity (a ServiceAccount bound to its read-only roles)",
		"one machine of 2 cores and 24 GiB for everything: control plane, kwok, daemonguard and the benchmark",
	}
}

// shapeFor is the benchmark's cluster of n nodes.
func shapeFor(n int) shape {
	return shape{nodes: n, podsPerNode: 30, auditDaemonSets: 2000, reviews: 500}
}

// BenchmarkScale measures daemonguard's costs on clusters of 1,000, 2,500 and 5,000 nodes with 30
// pods per node, one cluster per size, and writes the results (SCALEBENCH_RESULTS, default
// docs/scale/results.json, updated after each measurement) and the growth plot beside them; the
// controller's heap profiles go to SCALEBENCH_PROFILES when set. SCALEBENCH_NODES
// picks the sizes (e.g. "1000,2500"); SCALEBENCH_BEFORE names a daemonguard binary of another
// build whose controller and plans are measured on the same clusters, for a before/after.
//
//	make scalebench
func BenchmarkScale(b *testing.B) {
	localcluster.NeedCluster(b)
	sizes := []int{1000, 2500, 5000}
	if env := os.Getenv("SCALEBENCH_NODES"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 || n%10 != 0 {
				b.Fatalf("SCALEBENCH_NODES=%q: want node counts that are multiples of 10", env)
			}
			sizes = append(sizes, n)
		}
	}
	path := os.Getenv("SCALEBENCH_RESULTS")
	if path == "" {
		path = toolbin.RepoPath(b, "docs", "scale", "results.json")
	}
	bin := buildBinary(b, b.TempDir())
	for _, n := range sizes {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			for range b.N {
				s := shapeFor(n)
				var results Results
				run := runScale(b, s, bin, os.Getenv("SCALEBENCH_BEFORE"), func(run Run) {
					var err error
					if results, err = Load(path); err != nil {
						b.Fatal(err)
					}
					results.Settings = settings(s)
					results.Put(run)
					if err := save(results, path); err != nil {
						b.Fatal(err)
					}
				})
				fmt.Printf("--- %s\n%s\n", b.Name(), results.Markdown())
				b.ReportMetric(run.Rollout.ManagedSeconds/run.Rollout.BuiltinSeconds, "managed/builtin")
				b.ReportMetric(run.Rollout.ControllerPeakRSSMiB, "controller-MiB")
				b.ReportMetric(run.Webhook.PeakRSSMiB, "webhook-MiB")
			}
		})
	}
}

// save writes the results and, beside them, the growth plot.
func save(results Results, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := results.Save(path); err != nil {
		return err
	}
	svg, err := results.GrowthSVG()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(filepath.Dir(path), "growth.svg"), svg, 0o644)
}

// TestScaleSmoke runs the scale benchmark's every step on 200 nodes, so that it keeps working,
// and holds each measurement to what it must show: the rollouts complete, every join-storm pod is
// created, the audit writes its Reports, the plans plan every node.
func TestScaleSmoke(t *testing.T) {
	localcluster.NeedCluster(t)
	s := shape{nodes: 200, podsPerNode: 30, auditDaemonSets: 200, reviews: 50}
	var recorded []Run
	run := runScale(t, s, buildBinary(t, t.TempDir()), "", func(run Run) { recorded = append(recorded, run) })
	if run.Pods != 200*30 || run.DaemonSets != len(agents) {
		t.Errorf("cluster of %d pods and %d DaemonSets, want %d and %d", run.Pods, run.DaemonSets, 200*30, len(agents))
	}
	if run.Webhook.JoinFailed != 0 || run.Webhook.JoinPods != 20*len(agents) {
		t.Errorf("join storm: %d pods, %d failed; want %d, none failed", run.Webhook.JoinPods, run.Webhook.JoinFailed, 20*len(agents))
	}
	// Every tenth audited DaemonSet breaks the tightened budget: one PolicyViolation Event each.
	if run.Audit.Seconds <= 0 || run.Audit.Events < s.auditDaemonSets/10 || run.Audit.Reports == 0 {
		t.Errorf("audit %+v: want a duration, at least %d Events and Reports", run.Audit, s.auditDaemonSets/10)
	}
	if run.Rollout.ControllerPeakRSSMiB <= 0 || run.Webhook.PeakRSSMiB <= 0 || run.Webhook.ReviewP99Ms <= 0 {
		t.Errorf("missing measurements: rollout %+v, webhook %+v", run.Rollout, run.Webhook)
	}
	if len(run.Plans) != len(plannedDaemonSets) {
		t.Errorf("plans %+v, want %d", run.Plans, len(plannedDaemonSets))
	}
	// kwok's ready delay shows in every new pod: the API's times are whole seconds.
	for _, c := range []RolloutCost{run.Rollout.Builtin, run.Rollout.Managed} {
		if c.ReadyP50Seconds < (readyDelay-time.Second).Seconds() || c.ReadyP99Seconds < c.ReadyP50Seconds {
			t.Errorf("new pods scheduled to Ready: p50 %v s, p99 %v s; want at least %v less a second", c.ReadyP50Seconds, c.ReadyP99Seconds, readyDelay)
		}
	}
	// Each measurement is recorded as it ends, the audit's last.
	if len(recorded) != 5 || recorded[0].Rollout.ManagedSeconds != 0 || recorded[3].Audit.Seconds != 0 || !reflect.DeepEqual(recorded[4], run) {
		t.Errorf("recorded %d runs %+v, want one per measurement ending with the whole run", len(recorded), recorded)
	}
	var results Results
	results.Settings = settings(s)
	results.Put(run)
	if err := save(results, filepath.Join(t.TempDir(), "results.json")); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", results.Markdown())
}

// runScale starts a cluster of s.nodes nodes, populates it, installs daemonguard and measures it,
// handing the run to record after each measurement so that a run stopped part way keeps what it
// measured. With before set, it also measures that binary's controller and plans on the same
// cluster. The audit is measured last (see addAudited).
func runScale(t testing.TB, s shape, bin, before string, record func(Run)) Run {
	t.Helper()
	start := time.Now()
	c, err := localcluster.Start(context.Background(), localcluster.Config{
		Nodes: scaleNodes(s.nodes), PodReadyDelay: readyDelay, NodeLeaseDuration: leaseDuration,
		StartTimeout: 60 * time.Minute, Log: os.Stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	run := Run{Nodes: s.nodes, DaemonSets: len(agents), Date: time.Now().UTC().Format(time.DateOnly)}
	run.Pods = populate(t, c, s)
	run.PopulateSeconds = time.Since(start).Seconds()
	logf(t, "%d nodes, %d pods, %d DaemonSets populated in %s", s.nodes, run.Pods, len(agents), time.Since(start).Round(time.Second))

	r := installChart(t, c)
	web := r.runWebhook(t, bin)
	run.Webhook.StartupSeconds = web.startup.Seconds()
	p50, p99 := measureReviews(t, c, s.reviews)
	run.Webhook.ReviewP50Ms, run.Webhook.ReviewP99Ms, run.Webhook.Reviews = millis(p50), millis(p99), s.reviews
	logf(t, "webhook ready in %s; reviews p50 %s, p99 %s", web.startup.Round(time.Millisecond), p50, p99)
	record(run)

	run.Rollout = measureRollouts(t, r, web.Proc.PID(), bin, s.nodes, "agent:2")
	logf(t, "rollouts %+v", run.Rollout)
	record(run)
	for _, p := range plannedDaemonSets {
		run.Plans = append(run.Plans, measurePlan(t, r, bin, p.kind, p.daemonSet))
	}
	logf(t, "plans %+v", run.Plans)
	record(run)
	if before != "" {
		b := Run{Nodes: s.nodes, Pods: run.Pods, DaemonSets: run.DaemonSets, Date: run.Date}
		b.Rollout = measureRollouts(t, r, web.Proc.PID(), before, s.nodes, "agent:3")
		for _, p := range plannedDaemonSets {
			b.Plans = append(b.Plans, measurePlan(t, r, before, p.kind, p.daemonSet))
		}
		run.Before = &b
		logf(t, "before: rollouts %+v, plans %+v", b.Rollout, b.Plans)
		record(run)
	}

	took, pods, failed := measureJoinStorm(t, c, s.nodes, s.nodes/10)
	run.Webhook.JoinNodes, run.Webhook.JoinPods, run.Webhook.JoinFailed, run.Webhook.JoinSeconds = s.nodes/10, pods, failed, took.Seconds()
	run.Webhook.RSSMiB, run.Webhook.PeakRSSMiB = procStatus(web.Proc.PID(), "VmRSS"), procStatus(web.Proc.PID(), "VmHWM")
	logf(t, "webhook %+v", run.Webhook)
	record(run)

	// The audit runs as a webhook replica starts: a second one, started once the audited
	// DaemonSets exist and the policy is tightened, runs the pass measured. The first replica
	// stops first (it releases the audit's lease and the port the webhook configurations name).
	// The DaemonSet controller stops before the audited DaemonSets are created: nothing measured
	// from here on needs it (see addAudited).
	if err := c.StopComponent("kube-controller-manager"); err != nil {
		t.Fatal(err)
	}
	addAudited(t, c, s)
	web.Proc.Stop()
	tightenBudget(t, c, r.Namespace)
	run.Audit = measureAudit(t, r, r.runWebhook(t, bin), s)
	logf(t, "audit %+v", run.Audit)
	record(run)
	return run
}

// measureRollouts runs the controller (binary bin) and rolls the built-in DaemonSet, then the
// managed one, to image; the controller's peak RSS and CPU time are from its start to the end of
// the managed rollout. The controller stops at the end.
func measureRollouts(t testing.TB, r *release, webhookPID int, bin string, nodes int, image string) Rollout {
	t.Helper()
	pprofAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	ctl := r.runController(t, bin, pprofAddr)
	defer ctl.Proc.Stop()
	procs := clusterProcesses(r.Cluster)
	procs["daemonguard controller"], procs["daemonguard webhook"] = ctl.Proc.PID(), webhookPID
	// Profiles of the controller, for `go tool pprof` (not results): kept in SCALEBENCH_PROFILES,
	// else only the heap's is taken, and removed with the test's temp dir.
	keep := os.Getenv("SCALEBENCH_PROFILES")
	dir := keep
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := func(kind string) string {
		return filepath.Join(dir, fmt.Sprintf("scalebench-controller-%s-%d-%s.pb.gz", kind, nodes, strings.TrimPrefix(image, "agent:")))
	}
	out := Rollout{Budget: budget}
	took, cost := rollOut(t, r.Cluster, procs, builtinAgent, image, nodes, false)
	out.BuiltinSeconds, out.Builtin = took.Seconds(), cost
	var cpuProfile chan error
	if keep != "" {
		// Over about as long as the built-in rollout took: where the controller's CPU goes
		// during the managed one.
		cpuProfile = make(chan error, 1)
		seconds := max(5, int(took.Seconds()))
		go func() {
			cpuProfile <- saveProfile(pprofAddr, fmt.Sprintf("profile?seconds=%d", seconds), name("cpu"), time.Duration(seconds)*time.Second+time.Minute)
		}()
	}
	took, cost = rollOut(t, r.Cluster, procs, managedAgent, image, nodes, true)
	out.ManagedSeconds, out.Managed = took.Seconds(), cost
	out.ControllerPeakRSSMiB, out.ControllerCPUSeconds = procStatus(ctl.Proc.PID(), "VmHWM"), clustertest.CPUTime(ctl.Proc.PID()).Seconds()
	if cpuProfile != nil {
		if err := <-cpuProfile; err != nil {
			t.Errorf("controller CPU profile: %v", err)
		} else {
			logf(t, "controller CPU profile: %s", name("cpu"))
		}
	}
	if err := saveHeapProfile(pprofAddr, name("heap")); err != nil {
		t.Errorf("controller heap profile: %v", err)
	} else {
		logf(t, "controller heap profile: %s", name("heap"))
	}
	return out
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// logf prints progress as it happens: a benchmark's log is shown only at its end.
func logf(t testing.TB, format string, args ...any) {
	t.Helper()
	fmt.Fprintf(os.Stderr, "%s %s: %s\n", time.Now().Format(time.TimeOnly), t.Name(), fmt.Sprintf(format, args...))
}
