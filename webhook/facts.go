package webhook

import (
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulinghelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// daemonSetDefaultTolerations are the tolerations the DaemonSet controller adds to every daemon
// pod (pkg/controller/daemon/util.AddOrUpdateDaemonPodTolerations); node eligibility must count them.
var daemonSetDefaultTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
}

// MatchingNodes counts the nodes a DaemonSet with this pod template would run on, by the DaemonSet
// controller's own test: node selector and required affinity match, and every NoSchedule/NoExecute
// taint is tolerated by the template or by the controller's default tolerations.
func MatchingNodes(podSpec *corev1.PodSpec, nodes []*corev1.Node) int {
	tolerations := append(append([]corev1.Toleration(nil), podSpec.Tolerations...), daemonSetDefaultTolerations...)
	affinity := nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: *podSpec})
	noScheduleOrExecute := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	n := 0
	for _, node := range nodes {
		if ok, _ := affinity.Match(node); !ok {
			continue
		}
		if _, untolerated := schedulinghelpers.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, tolerations, noScheduleOrExecute, false); untolerated {
			continue
		}
		n++
	}
	return n
}
