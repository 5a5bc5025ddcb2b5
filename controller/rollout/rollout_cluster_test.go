package rollout_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// 20 nodes: one tainted control-plane node and 19 workers over three zones.
const nodeCount = 20

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	nodes := append([]localcluster.Node{localcluster.ControlPlaneNode("control-plane-0")}, localcluster.WorkerNodes("worker", nodeCount-1)...)
	os.Exit(localcluster.RunTests(m, localcluster.Config{Nodes: nodes}, &cluster))
}

// managedDS is the seed's nginx-ds opted in to daemonguard's rollouts, tolerating the
// control-plane taint so it runs on all 20 nodes.
func managedDS(image string, annotations map[string]string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: nginx-ds\n  labels: {app: nginx-ds}\n  annotations:\n    daemonguard.io/rollout: managed\n")
	for k, v := range annotations {
		fmt.Fprintf(&b, "    %s: %q\n", k, v)
	}
	fmt.Fprintf(&b, `spec:
  revisionHistoryLimit: 10
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: nginx-ds}}
  template:
    metadata: {labels: {app: nginx-ds}}
    spec:
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
      containers:
      - name: nginx-ds
        image: %s
        ports: [{containerPort: 80}]
`, image)
	return b.String()
}

// deployManaged applies managedDS running nginx:1.7.9 with settings and waits until it runs on
// nodes nodes and its rollout is Complete.
func deployManaged(t *testing.T, ns string, nodes int, settings map[string]string) {
	t.Helper()
	clustertest.Kubectl(t, cluster, managedDS("nginx:1.7.9", settings), "apply", "-n", ns, "-f", "-")
	waitSettled(t, ns, "nginx:1.7.9", nodes)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
}

// setImage changes the image of nginx-ds: the rollout starts.
func setImage(t *testing.T, ns, image string) {
	t.Helper()
	clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds="+image)
}

// sampleBudget starts sampling the namespace's pods on every reachable node.
func sampleBudget(t *testing.T, ns string) *clustertest.BudgetSampler {
	t.Helper()
	return clustertest.NewBudgetSampler(t, cluster, ns, clustertest.SamplerOptions{})
}

// checkBudget fails the test if the sampler saw more than budget reachable nodes without an
// available pod at once, or saw no rollout at all.
func checkBudget(t *testing.T, s *clustertest.BudgetSampler, budget int) {
	t.Helper()
	s.CheckBudget(t, budget)
	s.CheckSawRollout(t, nodeCount)
}

func startController(t *testing.T) *harness.Controller {
	t.Helper()
	ctl, err := harness.StartController(context.Background(), cluster)
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

func getDS(ctx context.Context, ns string) (*appsv1.DaemonSet, error) {
	return cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, "nginx-ds", metav1.GetOptions{})
}

// waitPhase waits until the given rollout condition of nginx-ds is True.
func waitPhase(t *testing.T, ns string, phase rolloutapi.Phase, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	return waitPhaseOf(t, ns, "nginx-ds", phase, timeout)
}

// waitPhaseOf waits until the given rollout condition of the named DaemonSet is True.
func waitPhaseOf(t *testing.T, ns, name string, phase rolloutapi.Phase, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	return clustertest.WaitDaemonSet(t, cluster, ns, name, timeout, name+" rollout condition "+string(phase), func(ds *appsv1.DaemonSet) (bool, string) {
		return clustertest.RolloutCondition(ds, phase) != nil, fmt.Sprintf("conditions %+v annotations %v", ds.Status.Conditions, ds.Annotations)
	})
}

// waitEvent waits until an Event of the namespace matches.
func waitEvent(t *testing.T, ns, what string, match func(eventsv1.Event) bool) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, what, func(ctx context.Context) (bool, string) {
		evs, err := cluster.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return slices.ContainsFunc(evs.Items, match), fmt.Sprintf("%d events, none matching", len(evs.Items))
	})
}

// waitSettled waits until each of want reachable nodes runs exactly one pod of nginx-ds, Ready and
// with image (terminating pods count, so none may be left). Nodes that are unreachable or gone are
// not counted, nor their pods: a kubelet that stopped acting never finishes a deletion.
func waitSettled(t *testing.T, ns string, image string, want int) {
	t.Helper()
	cluster.WaitFor(t, 3*time.Minute, "all pods running "+image, func(ctx context.Context) (bool, string) {
		nodes, err := cluster.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=nginx-ds"})
		if err != nil {
			return false, err.Error()
		}
		perNode := map[string][]*corev1.Pod{}
		for i := range pods.Items {
			perNode[pods.Items[i].Spec.NodeName] = append(perNode[pods.Items[i].Spec.NodeName], &pods.Items[i])
		}
		reachable, settled := 0, 0
		for i := range nodes.Items {
			if !clustertest.NodeReachable(&nodes.Items[i]) {
				continue
			}
			reachable++
			ps := perNode[nodes.Items[i].Name]
			if len(ps) == 1 && ps[0].DeletionTimestamp == nil && ps[0].Spec.Containers[0].Image == image && clustertest.PodReady(ps[0]) {
				settled++
			}
		}
		return reachable == want && settled == want, fmt.Sprintf("%d of %d reachable nodes (want %d) run one ready pod with %s", settled, reachable, want, image)
	})
}

// startPausedRollout deploys nginx:1.7.9 on nodes nodes with the given settings, whose first
// step updates canary nodes and the second pauses, rolls out nginx:1.24.0 and returns once the
// rollout is paused after its canary step, with a sampler watching.
func startPausedRollout(t *testing.T, ns string, nodes int, settings map[string]string, canary int) *clustertest.BudgetSampler {
	t.Helper()
	deployManaged(t, ns, nodes, settings)
	s := sampleBudget(t, ns)
	setImage(t, ns, "nginx:1.24.0")
	ds := waitPhase(t, ns, rolloutapi.PhasePaused, time.Minute)
	if got := ds.Annotations[rolloutapi.StatusStep]; !strings.HasPrefix(got, "2/3") {
		t.Fatalf("paused at step %q, want 2/3", got)
	}
	if got, want := ds.Annotations[rolloutapi.StatusUpdated], fmt.Sprintf("%d/", canary); !strings.HasPrefix(got, want) {
		t.Fatalf("paused with %s = %q, want %d nodes updated", rolloutapi.StatusUpdated, got, canary)
	}
	return s
}

func TestManagedRolloutStaysWithinBudgetAtEveryInstant(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	deployManaged(t, ns, nodeCount, map[string]string{rolloutapi.AnnotationMaxUnavailable: "2"})

	s := sampleBudget(t, ns)
	setImage(t, ns, "nginx:1.24.0")
	waitSettled(t, ns, "nginx:1.24.0", nodeCount)
	ds := waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)

	checkBudget(t, s, 2)
	if got := ds.Annotations[rolloutapi.StatusUpdated]; got != "20/20" {
		t.Errorf("status %s = %q, want 20/20", rolloutapi.StatusUpdated, got)
	}
}

func TestFailingImageHaltsAfterFirstStepAndRollForwardCompletes(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	deployManaged(t, ns, nodeCount, nil)

	s := sampleBudget(t, ns)
	setImage(t, ns, "nginx:1.91")
	ds := waitPhase(t, ns, rolloutapi.PhaseFailed, 2*time.Minute)
	failed := clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed)
	if failed.Reason != "PodFailure" || !strings.Contains(failed.Message, "ImagePullBackOff") {
		t.Errorf("Failed condition %s: %s, want PodFailure naming ImagePullBackOff", failed.Reason, failed.Message)
	}
	waitEvent(t, ns, "a RolloutFailed event naming the node", func(e eventsv1.Event) bool {
		return e.Reason == "RolloutFailed" && strings.Contains(e.Note, "worker-0: ImagePullBackOff")
	})

	// Roll forward with a good image: the failure belongs to the old revision.
	setImage(t, ns, "nginx:1.25.5")
	waitSettled(t, ns, "nginx:1.25.5", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	touched := s.MaxRunning("nginx:1.91")
	if touched > 1 {
		t.Errorf("%d nodes ran the broken image at once; the budget is 1", touched)
	}
	if touched == 0 {
		t.Error("the sampler never saw the broken image")
	}
}

// Pods that run but never become Ready (nginx:never-ready, see the kwok stage
// pod-running-not-ready.yaml) show no failure of their own: the progress deadline halts the
// rollout, and the condition and the Event say so, with the deadline, the nodes, since when, and
// how to get out. Later reconciles (the controller's own status write triggers one) keep saying it.
func TestNeverReadyPodsHaltOnTheProgressDeadlineAndSaySo(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	deployManaged(t, ns, nodeCount, map[string]string{rolloutapi.AnnotationMaxUnavailable: "2", rolloutapi.AnnotationProgressDeadline: "5s"})

	setImage(t, ns, "nginx:never-ready")
	ds := waitPhase(t, ns, rolloutapi.PhaseFailed, 2*time.Minute)
	failed := clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed)
	for _, want := range []string{
		"step 1/1 (100%): new pods not Ready within the progress deadline of 5s",
		"new pods not available on 2 of 20 nodes: worker-0: not Ready since ", ", worker-1: not Ready since ",
		"no further pods are replaced; fix the template and apply it to roll forward, or roll back with: daemonguard rollout undo ds/nginx-ds -n " + ns,
	} {
		if failed.Reason != rolloutapi.ReasonProgressDeadline || !strings.Contains(failed.Message, want) {
			t.Errorf("Failed condition %s: %q, want %s naming %q", failed.Reason, failed.Message, rolloutapi.ReasonProgressDeadline, want)
		}
	}
	note := failed.Reason + ": " + failed.Message
	waitEvent(t, ns, fmt.Sprintf("a RolloutFailed event with the note %q", note), func(e eventsv1.Event) bool {
		return e.Reason == "RolloutFailed" && e.Type == corev1.EventTypeWarning && e.Note == note
	})
	ds, err := getDS(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if again := clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed); again == nil || again.Reason != failed.Reason || again.Message != failed.Message {
		t.Errorf("after later reconciles the Failed condition is %+v, want it unchanged: %s: %s", again, failed.Reason, failed.Message)
	}
}

func TestRestartMidRolloutResumesWithoutOvershoot(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	ns := cluster.NewTestNamespace(t)
	// Stop the controller while the canary step's timed pause runs: mid-rollout.
	s := startPausedRollout(t, ns, nodeCount, map[string]string{
		rolloutapi.AnnotationMaxUnavailable: "3", rolloutapi.AnnotationSteps: "3,pause:4s,100%",
	}, 3)
	if err := ctl.Stop(); err != nil {
		t.Fatalf("controller stopped with %v", err)
	}
	ctl = startController(t)
	defer ctl.Stop()
	waitSettled(t, ns, "nginx:1.24.0", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	if maxUnavailable := s.MaxUnavailable(); maxUnavailable > 3 || maxUnavailable == 0 {
		t.Errorf("max unavailable %d across the restart, want 1..3", maxUnavailable)
	}
}
