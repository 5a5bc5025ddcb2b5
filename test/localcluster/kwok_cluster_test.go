package localcluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// kwok takes pod events in the order of its one pod watch, so once a pod created (or deleted)
// after an unstarted one has been started (or deleted), kwok has seen the unstarted pod's event
// too and left it alone.
func TestUnstartedPodsAreLeftAloneByKwok(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	pods := cluster.Client.CoreV1().Pods(ns)
	ctx := context.Background()
	node := localcluster.WorkerNodes("worker", 1)[0].Name
	newPod := func(name string, labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:   node,
				Containers: []corev1.Container{{Name: "c", Image: "nginx:1.25"}},
			},
		}
	}
	for _, p := range []*corev1.Pod{
		newPod("unstarted", map[string]string{localcluster.UnstartedLabel: "true"}),
		newPod("started", nil),
	} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// kwok never confirms the unstarted pod's deletion; without a grace period the API
		// server removes it alone, and the namespace can go.
		_ = pods.Delete(context.Background(), "unstarted", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})

	cluster.WaitFor(t, time.Minute, "the started pod Running and Ready", func(ctx context.Context) (bool, string) {
		p, err := pods.Get(ctx, "started", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return podReady(p), fmt.Sprintf("%s %+v", p.Status.Phase, p.Status.Conditions)
	})
	unstarted, err := pods.Get(ctx, "unstarted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := unstarted.Status; s.Phase != corev1.PodPending || s.PodIP != "" || len(s.Conditions) != 0 || len(s.ContainerStatuses) != 0 {
		t.Errorf("kwok played a stage on the unstarted pod: %+v", s)
	}

	for _, name := range []string{"unstarted", "started"} {
		if err := pods.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cluster.WaitFor(t, time.Minute, "kwok deleted the started pod", func(ctx context.Context) (bool, string) {
		_, err := pods.Get(ctx, "started", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	unstarted, err = pods.Get(ctx, "unstarted", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the unstarted pod should stay Terminating, as no kubelet confirms its deletion: %v", err)
	}
	if unstarted.DeletionTimestamp == nil {
		t.Errorf("the unstarted pod has no deletion timestamp after its deletion")
	}
}
