package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/agentmetrics"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/promtest"
)

// errorsGate halts a wave on which any node reports an error ratio above 0.1 for the new revision
// (series of an older one linger after a Prometheus restart, with no staleness marker), measured once, 2 s
// after the wave is up (Prometheus scrapes every second).
const errorsGate = `- {name: errors, query: 'max by (node) (agent_error_ratio{node=~"{{ nodes }}",revision="{{ revision }}"})', max: 0.1, interval: 2s, count: 1}`

// TestAnalysisGatesJudgeEachWaveInARealPrometheus rolls nginx-ds out on 20 nodes with a budget
// of 2 and an analysis gate, measured by a real Prometheus scraping a stand-in for the node
// agents whose series follow each node's pod revision (test/agentmetrics): a release whose pods
// report errors halts at the first wave, naming the nodes; the roll forward to a healthy one,
// with Prometheus stopped while its first wave is up, pauses as inconclusive and completes once
// Prometheus is back. The budget is sampled on every pod and node event throughout.
func TestAnalysisGatesJudgeEachWaveInARealPrometheus(t *testing.T) {
	ns, agents, prom := startAnalysis(t)
	const budget = 2
	deployManaged(t, ns, nodeCount, map[string]string{rolloutapi.AnnotationMaxUnavailable: fmt.Sprint(budget), rolloutapi.AnnotationAnalysis: errorsGate})
	prom.WaitForSamples(t, "agent_error_ratio == 0", nodeCount)
	s := sampleBudget(t, ns)

	// The new release's pods report an error ratio of 0.5; the old one's 0.
	agents.Set(revisionOf(t, ns, "nginx:1.7.9"), 0)
	agents.SetOthers(0.5)
	setImage(t, ns, "nginx:1.24.0")
	ds := waitPhase(t, ns, rolloutapi.PhaseFailed, 2*time.Minute)
	failed := clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed)
	if failed.Reason != rolloutapi.ReasonAnalysisFailed || !strings.Contains(failed.Message, "gate errors: 2 of 2 nodes out of bounds (max 0.1)") ||
		!strings.Contains(failed.Message, "=0.5") {
		t.Fatalf("halted with %s: %s; want AnalysisFailed naming the gate, the first wave's 2 nodes and their values", failed.Reason, failed.Message)
	}
	t.Logf("halted: %s", failed.Message)
	if n := nodesRunning(t, ns, "nginx:1.24.0"); n != budget {
		t.Errorf("%d nodes run the failing release after the halt, want the first wave's %d", n, budget)
	}

	// The roll forward's pods report no errors; the failed release's keep reporting theirs.
	agents.Set(ds.Annotations[rolloutapi.StatusFailedRevision], 0.5)
	agents.SetOthers(0)
	if err := prom.Stop(); err != nil {
		t.Fatal(err)
	}
	setImage(t, ns, "nginx:1.25.0")
	ds = waitPhase(t, ns, rolloutapi.PhasePaused, 2*time.Minute)
	if c := clustertest.RolloutCondition(ds, rolloutapi.PhasePaused); c.Reason != rolloutapi.ReasonAnalysisInconclusive || !strings.Contains(c.Message, "no answer from Prometheus") {
		t.Fatalf("with Prometheus stopped the rollout is paused with %s: %s; want AnalysisInconclusive saying Prometheus did not answer", c.Reason, c.Message)
	}
	paused := nodesRunning(t, ns, "nginx:1.25.0")
	if err := prom.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, ns, "nginx:1.25.0", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, 2*time.Minute)
	t.Logf("paused with %d nodes on the roll forward while Prometheus was down; completed once it was back", paused)
	if paused > 2*budget {
		t.Errorf("%d nodes ran the roll forward while Prometheus was down, want at most the failed wave's and the first wave's %d", paused, 2*budget)
	}
	checkBudget(t, s, budget)
}

// startAnalysis is what a gate test runs on: a namespace, the exporter of its nginx-ds's per-node
// series, a real Prometheus scraping it and the rollout controller measuring gates there; all
// stop when the test ends.
func startAnalysis(t *testing.T) (string, *agentmetrics.Exporter, *promtest.Server) {
	t.Helper()
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	agents := agentmetrics.New(cluster.Client, ns, "nginx-ds")
	prom := promtest.Start(t, promtest.Options{Targets: []promtest.Target{{Job: "agents", URL: agents.Serve(t)}}})
	ctl, err := harness.StartControllerWith(context.Background(), cluster, harness.ControllerOptions{
		Namespaces: []string{ns}, Prometheus: promquery.Options{Address: prom.Address(), Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctl.Stop(); err != nil {
			t.Errorf("stop the controller: %v", err)
		}
	})
	return ns, agents, prom
}

// revisionOf is the controller-revision-hash of the pods running image.
func revisionOf(t *testing.T, ns, image string) string {
	t.Helper()
	pods, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=nginx-ds"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image == image {
			return p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
		}
	}
	t.Fatalf("no pod of nginx-ds runs %s", image)
	return ""
}

// nodesRunning counts the pods of nginx-ds running image.
func nodesRunning(t *testing.T, ns, image string) int {
	t.Helper()
	pods, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=nginx-ds"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pods.Items {
		if p.Spec.Containers[0].Image == image && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// baselineGate compares each node of a wave with the median of nodes outside it, whatever their
// revision: a new release may report at most 0.1 more errors than the nodes it has not reached.
const baselineGate = `- {name: errors-vs-baseline, query: 'max by (node) (agent_error_ratio{node=~"{{ nodes }}"})', baseline: true, max: 0.1, interval: 2s, count: 1}`

// TestBaselineGateIgnoresNoisePausesOnMissingDataAndRollsBack rolls nginx-ds out on 20 nodes with
// a budget of 5 and a baseline gate, measured by a real Prometheus:
//   - with 0.4 of noise on every node, which would fail an absolute bound of 0.1, a release that
//     adds 0.05 completes: only the difference from the old-revision nodes counts;
//   - a node whose series the exporter drops pauses the rollout as inconclusive, naming it, and
//     nothing more is deleted until its series is back;
//   - with daemonguard.io/on-analysis-failure: rollback, a release that adds 0.5 fails its first
//     wave and the controller puts the previous template back, which then rolls out to every node.
//
// The budget is sampled on every pod and node event throughout.
func TestBaselineGateIgnoresNoisePausesOnMissingDataAndRollsBack(t *testing.T) {
	ns, agents, prom := startAnalysis(t)
	const budget = 5
	agents.SetNoise(0.4)
	deployManaged(t, ns, nodeCount, map[string]string{rolloutapi.AnnotationMaxUnavailable: fmt.Sprint(budget), rolloutapi.AnnotationAnalysis: baselineGate})
	prom.WaitForSamples(t, "agent_error_ratio >= 0.4", nodeCount)
	s := sampleBudget(t, ns)

	// Noise: every node reports 0.4, the new release's nodes 0.45.
	agents.Set(revisionOf(t, ns, "nginx:1.7.9"), 0)
	agents.SetOthers(0.05)
	setImage(t, ns, "nginx:1.24.0")
	waitSettled(t, ns, "nginx:1.24.0", nodeCount)
	ds := waitPhase(t, ns, rolloutapi.PhaseComplete, 2*time.Minute)
	if got := clustertest.LastMeasurement(t, ds, "errors-vs-baseline"); got == nil || got.Result != rolloutapi.MeasurementPassed {
		t.Fatalf("last measurement of the baseline gate %+v, want Passed", got)
	}

	// Missing data: the exporter stops serving one node's series before the next release.
	agents.Set(revisionOf(t, ns, "nginx:1.24.0"), 0.05)
	agents.SetOthers(0.05)
	const dropped = "worker-7"
	agents.Drop(dropped, true)
	setImage(t, ns, "nginx:1.25.0")
	ds = clustertest.WaitDaemonSet(t, cluster, ns, "nginx-ds", 3*time.Minute, "paused for "+dropped+"'s missing series", func(ds *appsv1.DaemonSet) (bool, string) {
		c := clustertest.RolloutCondition(ds, rolloutapi.PhasePaused)
		return c != nil && c.Reason == rolloutapi.ReasonAnalysisInconclusive && strings.Contains(c.Message, dropped), fmt.Sprintf("conditions %+v", ds.Status.Conditions)
	})
	t.Logf("paused: %s", clustertest.RolloutCondition(ds, rolloutapi.PhasePaused).Message)
	pausedAt := clustertest.RolloutCondition(ds, rolloutapi.PhasePaused).LastTransitionTime.Time
	running := nodesRunning(t, ns, "nginx:1.25.0")
	// The controller measures again after 2s, 4s, 8s (the interval, doubling while inconclusive);
	// still without the series, it deletes nothing, and the pause shows at every look.
	measured := watchPause(t, ns, 16*time.Second, dropped)
	if len(measured) < 3 {
		t.Errorf("%d inconclusive measurements seen in the pause (%v), want at least 3", len(measured), measured)
	}
	for i := 2; i < len(measured); i++ {
		if gap, last := measured[i].Sub(measured[i-1]), measured[i-1].Sub(measured[i-2]); gap < last+last/2 {
			t.Errorf("measurements of the pause at %v: %s after %s, want the wait doubling", measured, gap, last)
		}
	}
	paused, pausedNotes := rolloutEvents(t, ns, "RolloutPaused", pausedAt.Add(-time.Second))
	progressing, progressingNotes := rolloutEvents(t, ns, "RolloutProgressing", pausedAt.Add(time.Second))
	if paused != 1 || progressing != 0 {
		t.Errorf("%d RolloutPaused and %d RolloutProgressing Events since the pause, want 1 and 0: one per change of cause: %q",
			paused, progressing, append(pausedNotes, progressingNotes...))
	}
	if n := nodesRunning(t, ns, "nginx:1.25.0"); n != running {
		t.Errorf("%d nodes ran nginx:1.25.0 when the rollout paused and %d after it measured again: the pause deleted pods", running, n)
	}
	agents.Drop(dropped, false)
	waitSettled(t, ns, "nginx:1.25.0", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, 2*time.Minute)

	// Rollback: the next release adds 0.5 on every node it reaches.
	good := revisionOf(t, ns, "nginx:1.25.0")
	agents.Set(good, 0.05)
	agents.SetOthers(0.55)
	clustertest.Kubectl(t, cluster, "", "annotate", "-n", ns, "ds/nginx-ds", rolloutapi.AnnotationOnAnalysisFailure+"="+rolloutapi.OnAnalysisFailureRollback)
	setImage(t, ns, "nginx:1.26.0")
	waitEvent(t, ns, "a RolloutRolledBack Event", func(e eventsv1.Event) bool {
		return e.Reason == "RolloutRolledBack" && e.Regarding.Name == "nginx-ds"
	})
	waitSettled(t, ns, "nginx:1.25.0", nodeCount)
	ds = waitPhase(t, ns, rolloutapi.PhaseComplete, 2*time.Minute)
	if image := ds.Spec.Template.Spec.Containers[0].Image; image != "nginx:1.25.0" {
		t.Errorf("template runs %s after the rollback, want nginx:1.25.0", image)
	}
	if got := revisionOf(t, ns, "nginx:1.25.0"); got != good {
		t.Errorf("pods run revision %s after the rollback, want the previous revision %s", got, good)
	}
	checkBudget(t, s, budget)
}

// watchPause looks at nginx-ds once a second for d and fails the test at any look whose rollout
// condition is not Paused/AnalysisInconclusive naming node; it returns the times of the
// inconclusive measurements of the errors-vs-baseline gate it saw.
func watchPause(t *testing.T, ns string, d time.Duration, node string) []time.Time {
	t.Helper()
	var measured []time.Time
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Second) {
		ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(t.Context(), "nginx-ds", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := rolloutplan.ActiveCondition(ds.Status.Conditions)
		if c == nil || c.Type != rolloutapi.ConditionPaused || c.Reason != rolloutapi.ReasonAnalysisInconclusive || !strings.Contains(c.Message, node) {
			t.Fatalf("the pause for %s's missing series showed %+v", node, c)
		}
		if m := clustertest.LastMeasurement(t, ds, "errors-vs-baseline"); m != nil && m.Result == rolloutapi.MeasurementInconclusive &&
			(len(measured) == 0 || m.At.After(measured[len(measured)-1])) {
			measured = append(measured, m.At)
		}
	}
	return measured
}

// rolloutEvents counts the occurrences of nginx-ds's Events with reason since a moment (an Event
// repeated as a series counts each time) and says what they were.
func rolloutEvents(t *testing.T, ns, reason string, since time.Time) (int, []string) {
	t.Helper()
	evs, err := cluster.Client.EventsV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, notes := 0, []string(nil)
	for _, e := range evs.Items {
		if e.Reason != reason || e.Regarding.Name != "nginx-ds" {
			continue
		}
		switch {
		case e.Series != nil && e.Series.LastObservedTime.After(since):
			n += int(e.Series.Count)
		case e.EventTime.After(since):
			n++
		default:
			continue
		}
		notes = append(notes, fmt.Sprintf("%s %s (series %+v): %s", e.EventTime.UTC().Format(time.RFC3339Nano), e.Reason, e.Series, e.Note))
	}
	return n, notes
}
