package clustertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// WaitDaemonSet reads the DaemonSet ns/name until done holds for it and returns it as it was
// then. done's string says what the DaemonSet is instead; the test fails with it, and with what,
// when timeout passes (localcluster.Cluster.WaitFor).
func WaitDaemonSet(t testing.TB, c *localcluster.Cluster, ns, name string, timeout time.Duration, what string, done func(*appsv1.DaemonSet) (bool, string)) *appsv1.DaemonSet {
	t.Helper()
	var ds *appsv1.DaemonSet
	c.WaitFor(t, timeout, what, func(ctx context.Context) (bool, string) {
		got, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ds = got
		return done(got)
	})
	return ds
}

// PollDaemonSet is WaitDaemonSet for a benchmark that times the wait: it reads the DaemonSet
// every interval (WaitDaemonSet: every 200 ms), so it returns within interval of the moment done
// first held. It too fails the test at once when a component of the cluster has died.
func PollDaemonSet(t testing.TB, c *localcluster.Cluster, ns, name string, interval, timeout time.Duration, what string, done func(*appsv1.DaemonSet) (bool, string)) *appsv1.DaemonSet {
	t.Helper()
	var ds *appsv1.DaemonSet
	var reason string
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		got, err := c.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			reason = err.Error()
			return false, nil
		}
		var ok bool
		ok, reason = done(got)
		ds = got
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last state: %s)", what, err, reason)
	}
	return ds
}

// RolloutCondition returns the DaemonSet's condition of the rollout phase when it is True, or nil.
func RolloutCondition(ds *appsv1.DaemonSet, phase rolloutapi.Phase) *appsv1.DaemonSetCondition {
	for i := range ds.Status.Conditions {
		c := &ds.Status.Conditions[i]
		if string(c.Type) == string(phase) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

// LastMeasurement is the last measurement of the analysis gate named gate, as the DaemonSet's
// status annotation (status.daemonguard.io/analysis) reports it; nil when it has none.
func LastMeasurement(t testing.TB, ds *appsv1.DaemonSet, gate string) *rolloutapi.GateMeasurement {
	t.Helper()
	status, err := rolloutapi.DecodeStatus(ds.Annotations)
	if err != nil {
		t.Fatalf("decode the rollout status of %s: %v", ds.Name, err)
	}
	if status.Analysis == nil {
		return nil
	}
	for _, g := range status.Analysis.Gates {
		if g.Name == gate {
			return g.Last
		}
	}
	return nil
}

// RolledOut is a WaitDaemonSet condition: the DaemonSet's template runs image, its controller has
// observed its spec, and n pods are scheduled for it, updated and available; when managed, it also
// wants daemonguard's rollout condition Complete True.
func RolledOut(image string, n int, managed bool) func(*appsv1.DaemonSet) (bool, string) {
	return func(ds *appsv1.DaemonSet) (bool, string) {
		s := ds.Status
		got := ds.Spec.Template.Spec.Containers[0].Image
		done := got == image && s.ObservedGeneration == ds.Generation &&
			s.DesiredNumberScheduled == int32(n) && s.UpdatedNumberScheduled == int32(n) && s.NumberAvailable == int32(n)
		if done && managed {
			done = RolloutCondition(ds, rolloutapi.PhaseComplete) != nil
		}
		return done, fmt.Sprintf("image %s, observed generation %d of %d, desired %d, updated %d, available %d, conditions %+v",
			got, s.ObservedGeneration, ds.Generation, s.DesiredNumberScheduled, s.UpdatedNumberScheduled, s.NumberAvailable, s.Conditions)
	}
}
