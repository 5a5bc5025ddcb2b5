package rollout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// A controller started with --namespaces rolls out the managed DaemonSets of its namespace
// and leaves those of every other namespace alone: no pod deleted, no status written.
func TestWatchNamespaceRollsOnlyItsNamespace(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	watched := cluster.NewTestNamespace(t)
	other := watched + "-other"
	if err := cluster.CreateNamespace(ctx, other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Namespaces().Delete(context.Background(), other, metav1.DeleteOptions{})
	})

	ctl, err := harness.StartControllerWith(ctx, cluster, harness.ControllerOptions{Namespaces: []string{watched}})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Stop()

	for _, ns := range []string{watched, other} {
		clustertest.Kubectl(t, cluster, managedDS("nginx:1.7.9", map[string]string{rolloutapi.AnnotationMaxUnavailable: "5"}), "apply", "-n", ns, "-f", "-")
		waitSettled(t, ns, "nginx:1.7.9", nodeCount)
	}
	waitPhase(t, watched, rolloutapi.PhaseComplete, time.Minute)

	for _, ns := range []string{watched, other} {
		setImage(t, ns, "nginx:1.24.0")
	}
	waitSettled(t, watched, "nginx:1.24.0", nodeCount)
	waitPhase(t, watched, rolloutapi.PhaseComplete, time.Minute)

	// By now the controller has had every chance to act on the other namespace too.
	ds, err := getDS(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	for k := range ds.Annotations {
		if strings.HasPrefix(k, rolloutapi.StatusPrefix) {
			t.Errorf("the DaemonSet in %s, outside the watched namespace, got the status annotation %s", other, k)
		}
	}
	for _, c := range ds.Status.Conditions {
		t.Errorf("the DaemonSet in %s, outside the watched namespace, got the condition %s=%s", other, c.Type, c.Status)
	}
	pods, err := cluster.Client.CoreV1().Pods(other).List(ctx, metav1.ListOptions{LabelSelector: "app=nginx-ds"})
	if err != nil {
		t.Fatal(err)
	}
	old := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.Containers[0].Image == "nginx:1.7.9" && p.Status.Phase == corev1.PodRunning {
			old++
		}
	}
	if old != nodeCount {
		t.Errorf("%d of %d pods in %s still run the old image; OnDelete and outside the watched namespace, none may have been replaced", old, nodeCount, other)
	}
}
