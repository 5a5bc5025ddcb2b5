package nodes

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// Strip is the cache transform of the components that watch nodes (the admission webhook, the
// rollout controller): it keeps what they read, the name, labels and spec (the DaemonSet
// controller's rules) and whether the node is Ready (the rollout's reachability), and drops the
// rest, which at thousands of nodes is most of the cache. The forecast strips its nodes the same
// way, so it reads what the controller reads.
func Strip(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	n.ManagedFields = nil
	n.Annotations = nil
	var ready []corev1.NodeCondition
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			ready = append(ready, corev1.NodeCondition{Type: c.Type, Status: c.Status})
		}
	}
	n.Status = corev1.NodeStatus{Conditions: ready}
	return n, nil
}

// Changed tells whether two nodes as Strip keeps them differ in what their readers read: labels,
// spec, Ready or deletion. A node's status heartbeat (every few minutes per node; at 5,000 nodes
// several a second) changes none of it.
func Changed(old, cur *corev1.Node) bool {
	return !equality.Semantic.DeepEqual(old.Labels, cur.Labels) ||
		!equality.Semantic.DeepEqual(old.Spec, cur.Spec) ||
		ReadyStatus(old) != ReadyStatus(cur) ||
		!old.DeletionTimestamp.Equal(cur.DeletionTimestamp)
}

// ReadyStatus is the status of the node's Ready condition, "" without one.
func ReadyStatus(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}
