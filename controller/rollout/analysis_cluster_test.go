package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	agents := agentmetrics.New(cluster.Client, ns, "nginx-ds")
	prom := promtest.Start(t, promtest.Options{Targets: []promtest.Target{{Job: "agents", URL: agents.Serve(t)}}})
	ctl, err := harness.StartControllerWith(context.Background(), cluster, harness.ControllerOptions{
		Namespace: ns, Prometheus: promquery.Options{Address: prom.Address(), Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Stop()
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
