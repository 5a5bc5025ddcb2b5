package clustertest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

func TestRolledOut(t *testing.T) {
	done := func() *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Spec:       appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Image: "agent:2"}}}}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberAvailable: 3,
				Conditions: []appsv1.DaemonSetCondition{{Type: rolloutapi.ConditionComplete, Status: corev1.ConditionTrue}}},
		}
	}
	for name, tc := range map[string]struct {
		change  func(*appsv1.DaemonSet)
		managed bool
		want    bool
	}{
		"every pod updated and available is rolled out":    {change: func(*appsv1.DaemonSet) {}, want: true},
		"a managed one also needs Complete, and has it":    {change: func(*appsv1.DaemonSet) {}, managed: true, want: true},
		"another image is not":                             {change: func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "agent:1" }},
		"a spec the controller has not observed is not":    {change: func(ds *appsv1.DaemonSet) { ds.Status.ObservedGeneration = 1 }},
		"one pod not yet updated is not":                   {change: func(ds *appsv1.DaemonSet) { ds.Status.UpdatedNumberScheduled = 2 }},
		"one pod unavailable is not":                       {change: func(ds *appsv1.DaemonSet) { ds.Status.NumberAvailable = 2 }},
		"more nodes than asked is not":                     {change: func(ds *appsv1.DaemonSet) { ds.Status.DesiredNumberScheduled = 4 }},
		"a managed one whose Complete is False is not":     {change: func(ds *appsv1.DaemonSet) { ds.Status.Conditions[0].Status = corev1.ConditionFalse }, managed: true},
		"an unmanaged one does not look at the conditions": {change: func(ds *appsv1.DaemonSet) { ds.Status.Conditions = nil }, want: true},
	} {
		ds := done()
		tc.change(ds)
		if got, why := RolledOut("agent:2", 3, tc.managed)(ds); got != tc.want {
			t.Errorf("%s: RolledOut = %v (%s), want %v", name, got, why, tc.want)
		}
	}
}
