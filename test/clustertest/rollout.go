package clustertest

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

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
