// Package nodes answers which nodes a DaemonSet's pod template targets, by the DaemonSet
// controller's own rules. The admission webhook counts them for policies; the rollout controller
// rolls them.
package nodes

import (
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulinghelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// daemonSetDefaultTolerations are the tolerations the DaemonSet controller adds to every daemon
// pod (pkg/controller/daemon/util.AddOrUpdateDaemonPodTolerations); eligibility must count them.
var daemonSetDefaultTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// Matcher tests nodes against one pod template; build it once per template.
type Matcher struct {
	affinity    nodeaffinity.RequiredNodeAffinity
	tolerations []corev1.Toleration
}

// NewMatcher prepares the node selector, required affinity and tolerations of podSpec.
func NewMatcher(podSpec *corev1.PodSpec) *Matcher {
	return &Matcher{
		affinity:    nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: *podSpec}),
		tolerations: append(append([]corev1.Toleration(nil), podSpec.Tolerations...), daemonSetDefaultTolerations...),
	}
}

// Eligible tells whether the DaemonSet controller would run a pod of this template on node:
// node selector and required affinity match, and every NoSchedule/NoExecute taint is tolerated.
func (m *Matcher) Eligible(node *corev1.Node) bool {
	if ok, _ := m.affinity.Match(node); !ok {
		return false
	}
	_, untolerated := schedulinghelpers.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, m.tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false)
	return !untolerated
}

// Count returns how many of nodes the template targets.
func Count(podSpec *corev1.PodSpec, nodes []*corev1.Node) int {
	m := NewMatcher(podSpec)
	n := 0
	for _, node := range nodes {
		if m.Eligible(node) {
			n++
		}
	}
	return n
}
