package scalebench

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

// readyAfterScheduled is how long the Ready pods whose first container runs image took from
// their scheduling to Ready, by their conditions' transition times: its p50 and p99 in seconds,
// and how many pods it counts. The times are the API's whole seconds, so each value is within a
// second. A rollout's new pods take kwok's ready delay when kwok, which plays every kubelet,
// keeps up; far more, and the rollout's time measures kwok.
func readyAfterScheduled(pods []corev1.Pod, image string) (p50, p99 float64, n int) {
	var took []time.Duration
	for i := range pods {
		p := &pods[i]
		if len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image != image {
			continue
		}
		scheduled, ready := condition(p, corev1.PodScheduled), condition(p, corev1.PodReady)
		if scheduled == nil || ready == nil || ready.Status != corev1.ConditionTrue {
			continue
		}
		took = append(took, max(0, ready.LastTransitionTime.Sub(scheduled.LastTransitionTime.Time)))
	}
	slices.Sort(took)
	return loadgen.Percentile(took, 50).Seconds(), loadgen.Percentile(took, 99).Seconds(), len(took)
}

func condition(p *corev1.Pod, kind corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == kind {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}
