package preflight

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFitSparesPodsABudgetProtects(t *testing.T) {
	app := func(v string) podOpt { return func(p *corev1.Pod) { p.Labels = map[string]string{"app": v} } }
	budget := func(ns, name, app string, allowed int32, disrupted ...string) *policyv1.PodDisruptionBudget {
		b := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed, DisruptedPods: map[string]metav1.Time{}},
		}
		for _, d := range disrupted {
			b.Status.DisruptedPods[d] = metav1.NewTime(t0)
		}
		return b
	}
	pod := mkPod("default", "new", "", requests("1"), prio(1000))
	node := mkNode("n", allocatable("4", 10))
	// The node is full: one pod of 1 CPU must go. Without a budget the least important goes
	// ("db", started last).
	base := mkPod("x", "base", "n", requests("2"), prio(2000))
	early := mkPod("x", "batch", "n", requests("1"), started(t0.Add(-time.Hour)), app("batch"))
	late := mkPod("x", "db", "n", requests("1"), started(t0), app("db"))
	tests := map[string]struct {
		others  []*corev1.Pod
		budgets []*policyv1.PodDisruptionBudget
		want    []Victim
	}{
		"without a budget the least important pod goes": {
			others: []*corev1.Pod{base, early, late},
			want:   []Victim{{Namespace: "x", Name: "db"}},
		},
		"a budget that allows no disruption spares its pod when another makes room": {
			others:  []*corev1.Pod{base, early, late},
			budgets: []*policyv1.PodDisruptionBudget{budget("x", "db", "db", 0)},
			want:    []Victim{{Namespace: "x", Name: "batch"}},
		},
		"a budget with a disruption left protects nothing": {
			others:  []*corev1.Pod{base, early, late},
			budgets: []*policyv1.PodDisruptionBudget{budget("x", "db", "db", 1)},
			want:    []Victim{{Namespace: "x", Name: "db"}},
		},
		"a pod already counted as disrupted takes no disruption": {
			others:  []*corev1.Pod{base, early, late},
			budgets: []*policyv1.PodDisruptionBudget{budget("x", "db", "db", 0, "db")},
			want:    []Victim{{Namespace: "x", Name: "db"}},
		},
		"a budget of another namespace does not apply": {
			others:  []*corev1.Pod{base, early, late},
			budgets: []*policyv1.PodDisruptionBudget{budget("y", "db", "db", 0)},
			want:    []Victim{{Namespace: "x", Name: "db"}},
		},
		"when nothing else makes room the protected pod is preempted, naming the budget": {
			others:  []*corev1.Pod{mkPod("x", "base", "n", requests("3"), prio(2000)), late},
			budgets: []*policyv1.PodDisruptionBudget{budget("x", "db-budget", "db", 0)},
			want:    []Victim{{Namespace: "x", Name: "db", Budget: "db-budget"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := Fit(pod, node, tc.others, tc.budgets...)
			if !r.Schedulable || !reflect.DeepEqual(r.Preempts, tc.want) {
				t.Errorf("Fit = schedulable %v, preempts %+v; want schedulable, preempts %+v", r.Schedulable, r.Preempts, tc.want)
			}
		})
	}
}
