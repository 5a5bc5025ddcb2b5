package webhook

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/internal/nodes"
)

// MatchingNodes counts the nodes a DaemonSet with this pod template would run on, by the DaemonSet
// controller's own test (see package nodes).
func MatchingNodes(podSpec *corev1.PodSpec, all []*corev1.Node) int {
	return nodes.Count(podSpec, all)
}
