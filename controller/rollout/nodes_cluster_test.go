package rollout_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Node churn in the middle of a managed rollout, on the real DaemonSet controller, scheduler and
// node lifecycle controller. Each test pauses the rollout after its canary step ("2,pause,100%",
// budget 2: worker-0 and worker-1 updated), changes the nodes, resumes, and checks that the
// rollout completes while the budget, sampled after every pod and node event, holds.

// canarySteps updates two nodes and pauses until resumed. Nodes named worker-1-* sort right
// after worker-1, so they are the first ones replaced after the pause; worker-9-* are the last
// workers.
var canarySteps = map[string]string{rolloutapi.AnnotationMaxUnavailable: "2", rolloutapi.AnnotationSteps: "2,pause,100%"}

// extraNodes adds worker nodes for one test and deletes them when it ends, so every test of the
// package starts on the same 20 nodes.
func extraNodes(t *testing.T, names ...string) {
	t.Helper()
	var nodes []localcluster.Node
	for _, name := range names {
		nodes = append(nodes, localcluster.Node{Name: name, Labels: map[string]string{localcluster.ZoneLabel: "zone-a"}})
	}
	t.Cleanup(func() {
		for _, name := range names {
			_ = cluster.DeleteNode(context.Background(), name) // a test may have deleted it already
		}
	})
	if err := cluster.AddNodes(context.Background(), nodes...); err != nil {
		t.Fatal(err)
	}
}

func resume(t *testing.T, ns string) {
	t.Helper()
	clustertest.Kubectl(t, cluster, "", "annotate", "--overwrite", "-n", ns, "ds/nginx-ds", rolloutapi.AnnotationResume+"=1")
}

// podsOn returns the nginx-ds pods bound to node.
func podsOn(ctx context.Context, ns, node string) ([]corev1.Pod, error) {
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=nginx-ds", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

func TestNodeAddedMidRolloutGetsNewRevisionAndRolloutCompletes(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	s := startPausedRollout(t, ns, nodeCount, canarySteps, 2)

	// The DaemonSet controller, under OnDelete, starts the new node at the current template.
	const added = "worker-1-added"
	extraNodes(t, added)
	resume(t, ns)
	waitSettled(t, ns, "nginx:1.24.0", nodeCount+1)
	ds := waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)

	if got, want := ds.Annotations[rolloutapi.StatusUpdated], fmt.Sprintf("%d/%d", nodeCount+1, nodeCount+1); got != want {
		t.Errorf("status %s = %q, want %q", rolloutapi.StatusUpdated, got, want)
	}
	if images := s.ImagesSeenOn(added); !slices.Equal(images, []string{"nginx:1.24.0"}) {
		t.Errorf("the added node ran %v, want only the new revision's nginx:1.24.0", images)
	}
	checkBudget(t, s, 2)
}

func TestNodeDeletedMidRolloutDoesNotStickTheRollout(t *testing.T) {
	localcluster.NeedCluster(t)
	const gone = "worker-1-gone" // next in line after the pause, still on the old revision
	extraNodes(t, gone)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	s := startPausedRollout(t, ns, nodeCount+1, canarySteps, 2)

	if err := cluster.DeleteNode(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	resume(t, ns)
	// The deleted node's pod stays until the pod garbage collector's quarantine ends; neither the
	// DaemonSet controller nor the rollout waits for it.
	waitSettled(t, ns, "nginx:1.24.0", nodeCount)
	ds := waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	if got, want := ds.Annotations[rolloutapi.StatusUpdated], fmt.Sprintf("%d/%d", nodeCount, nodeCount); got != want {
		t.Errorf("status %s = %q, want %q", rolloutapi.StatusUpdated, got, want)
	}
	if images := s.ImagesSeenOn(gone); slices.Contains(images, "nginx:1.24.0") {
		t.Errorf("the deleted node ran %v; it was deleted before its turn", images)
	}
	checkBudget(t, s, 2)
}

// A pod stuck terminating and two nodes lost in the middle of the rollout. worker-9-lost loses its
// kubelet during the pause and is reported unreachable before its turn: its old pod is never
// touched. worker-1-lost, next in line, has an old pod held by a finalizer (a node agent that
// never finishes): the rollout deletes it, it never finishes terminating, and the DaemonSet
// controller starts no new pod beside it. That node holds one unit of the budget of 2, once,
// while the rest keeps rolling. When its kubelet dies too and it is reported unreachable, it is
// left out and the rollout completes.
func TestUnreachableNodesAndStuckPodsDoNotBlockTheRollout(t *testing.T) {
	localcluster.NeedCluster(t)
	const stuck, lost = "worker-1-lost", "worker-9-lost"
	extraNodes(t, stuck, lost)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	ctx := context.Background()
	s := startPausedRollout(t, ns, nodeCount+2, canarySteps, 2)

	if err := cluster.PartitionNode(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MarkNodeUnreachable(ctx, lost); err != nil {
		t.Fatal(err)
	}
	lostPods, err := podsOn(ctx, ns, lost)
	if err != nil || len(lostPods) != 1 {
		t.Fatalf("pods on %s: %d, %v", lost, len(lostPods), err)
	}
	stuckPods, err := podsOn(ctx, ns, stuck)
	if err != nil || len(stuckPods) != 1 {
		t.Fatalf("pods on %s: %d, %v", stuck, len(stuckPods), err)
	}
	stuckPod := stuckPods[0].Name
	const finalizer = "daemonguard.io/test-never-done"
	clustertest.Kubectl(t, cluster, "", "patch", "-n", ns, "pod/"+stuckPod, "--type=merge", "-p", `{"metadata":{"finalizers":["`+finalizer+`"]}}`)
	t.Cleanup(func() {
		_, _, _ = cluster.Kubectl(context.Background(), "", "patch", "-n", ns, "pod/"+stuckPod, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
	})
	resume(t, ns)

	cluster.WaitFor(t, time.Minute, "the rollout to delete the pod on "+stuck, func(ctx context.Context) (bool, string) {
		pods, err := podsOn(ctx, ns, stuck)
		if err != nil {
			return false, err.Error()
		}
		return len(pods) == 1 && pods[0].Name == stuckPod && pods[0].DeletionTimestamp != nil, fmt.Sprintf("%d pods", len(pods))
	})
	// Every reachable node but the stuck one gets updated: the stuck pod holds one unit of the
	// budget, the other unit keeps the rest moving.
	want := fmt.Sprintf("%d/%d", nodeCount, nodeCount+1)
	clustertest.WaitDaemonSet(t, cluster, ns, "nginx-ds", 2*time.Minute, "every other node updated while a pod is stuck terminating", func(ds *appsv1.DaemonSet) (bool, string) {
		got := ds.Annotations[rolloutapi.StatusUpdated]
		return got == want, fmt.Sprintf("%s = %q, want %q", rolloutapi.StatusUpdated, got, want)
	})
	pods, err := podsOn(ctx, ns, stuck)
	if err != nil || len(pods) != 1 || pods[0].Name != stuckPod || pods[0].DeletionTimestamp == nil {
		t.Fatalf("pods on %s: %d, %v; want only %s, terminating", stuck, len(pods), err, stuckPod)
	}
	if ds, _ := getDS(ctx, ns); clustertest.RolloutCondition(ds, rolloutapi.PhaseProgressing) == nil {
		t.Errorf("while a pod is stuck terminating the rollout is not Progressing: %+v", ds.Status.Conditions)
	}

	if err := cluster.PartitionNode(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	if err := cluster.MarkNodeUnreachable(ctx, stuck); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, ns, "nginx:1.24.0", nodeCount)
	ds := waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	if got, want := ds.Annotations[rolloutapi.StatusUpdated], fmt.Sprintf("%d/%d", nodeCount, nodeCount); got != want {
		t.Errorf("status %s = %q, want %q", rolloutapi.StatusUpdated, got, want)
	}
	msg := clustertest.RolloutCondition(ds, rolloutapi.PhaseComplete).Message
	for _, want := range []string{"2 nodes left out", stuck + ": node not ready or unreachable", lost + ": node not ready or unreachable"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Complete condition %q does not say %q", msg, want)
		}
	}
	// Pods on an unreachable node are never deleted: the old pod on worker-9-lost is untouched.
	pods, err = podsOn(ctx, ns, lost)
	if err != nil || len(pods) != 1 || pods[0].UID != lostPods[0].UID || pods[0].DeletionTimestamp != nil {
		t.Errorf("pods on %s: %d, %v; want its old pod %s untouched", lost, len(pods), err, lostPods[0].Name)
	}
	checkBudget(t, s, 2)
}
