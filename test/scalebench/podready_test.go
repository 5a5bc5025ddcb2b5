package scalebench

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestReadyAfterScheduled(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	at := func(s int) metav1.Time { return metav1.NewTime(t0.Add(time.Duration(s) * time.Second)) }
	pod := func(image string, conditions ...corev1.PodCondition) corev1.Pod {
		return corev1.Pod{
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: image}}},
			Status: corev1.PodStatus{Conditions: conditions},
		}
	}
	scheduled := func(s int) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at(s)}
	}
	ready := func(s int, status corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodReady, Status: status, LastTransitionTime: at(s)}
	}
	// readyAfter is a new pod scheduled at 0 and Ready after s seconds.
	readyAfter := func(s int) corev1.Pod { return pod("agent:2", scheduled(0), ready(s, corev1.ConditionTrue)) }
	var hundred []corev1.Pod
	for i := range 100 {
		hundred = append(hundred, readyAfter(2+i/98*60)) // 98 pods after 2 s, 2 after 62 s
	}
	for _, tc := range []struct {
		name     string
		pods     []corev1.Pod
		p50, p99 float64
		n        int
	}{
		{name: "no pods"},
		{name: "one pod", pods: []corev1.Pod{readyAfter(2)}, p50: 2, p99: 2, n: 1},
		{name: "the lagging tail shows at p99", pods: hundred, p50: 2, p99: 62, n: 100},
		{name: "only the new image's Ready pods with both times count", pods: []corev1.Pod{
			readyAfter(3),
			pod("agent:1", scheduled(0), ready(40, corev1.ConditionTrue)),  // the old revision
			pod("agent:2", scheduled(0), ready(50, corev1.ConditionFalse)), // not Ready
			pod("agent:2", ready(60, corev1.ConditionTrue)),                // never scheduled
			pod("agent:2", scheduled(0)),                                   // not Ready yet
			{Spec: corev1.PodSpec{}},                                       // no container
		}, p50: 3, p99: 3, n: 1},
		{name: "a clock step back counts as no time", pods: []corev1.Pod{pod("agent:2", scheduled(5), ready(4, corev1.ConditionTrue))}, n: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p50, p99, n := readyAfterScheduled(tc.pods, "agent:2")
			if p50 != tc.p50 || p99 != tc.p99 || n != tc.n {
				t.Errorf("readyAfterScheduled = %v, %v, %d; want %v, %v, %d", p50, p99, n, tc.p50, tc.p99, tc.n)
			}
		})
	}
}
