// Package nodes answers which nodes a DaemonSet's pod template targets, by the DaemonSet
// controller's own rules (NodeShouldRunDaemonPod). The admission webhook counts them for
// policies, the rollout controller rolls them, and the pre-flight plan explains them node by node.
// It also decides what of a node the components that watch nodes keep in their caches (Strip).
package nodes

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
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
	nodeName     string
	nodeSelector labels.Selector // nil without a node selector
	affinity     nodeaffinity.RequiredNodeAffinity
	tolerations  []corev1.Toleration
}

// NewMatcher prepares the node name, node selector, required affinity and tolerations of podSpec.
func NewMatcher(podSpec *corev1.PodSpec) *Matcher {
	m := &Matcher{
		nodeName:    podSpec.NodeName,
		affinity:    nodeaffinity.GetRequiredNodeAffinity(&corev1.Pod{Spec: *podSpec}),
		tolerations: append(append([]corev1.Toleration(nil), podSpec.Tolerations...), daemonSetDefaultTolerations...),
	}
	if len(podSpec.NodeSelector) > 0 {
		m.nodeSelector = labels.SelectorFromSet(podSpec.NodeSelector)
	}
	return m
}

// Placement is the DaemonSet controller's decision for one node.
type Placement struct {
	// Run: a daemon pod is created on the node when it has none.
	Run bool
	// Keep: a daemon pod already there keeps running. Run implies Keep; a NoSchedule taint the
	// template does not tolerate keeps new pods off but leaves the running one.
	Keep bool
	// Reason says in words why the pod does not run, or is not created, on the node; empty when Run.
	Reason string
}

// Decide is NodeShouldRunDaemonPod for this template: node name, node selector and required
// affinity must match, and every NoSchedule and NoExecute taint must be tolerated for Run; an
// untolerated NoSchedule taint alone still allows Keep.
func (m *Matcher) Decide(node *corev1.Node) Placement {
	if m.nodeName != "" && m.nodeName != node.Name {
		return Placement{Reason: fmt.Sprintf("spec.nodeName is %s", m.nodeName)}
	}
	if ok, _ := m.affinity.Match(node); !ok {
		if m.nodeSelector != nil && !m.nodeSelector.Matches(labels.Set(node.Labels)) {
			return Placement{Reason: fmt.Sprintf("nodeSelector %s does not match the node's labels", m.nodeSelector)}
		}
		return Placement{Reason: "required node affinity does not match the node's labels"}
	}
	taint, untolerated := m.untolerated(node, corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute)
	if !untolerated {
		return Placement{Run: true, Keep: true}
	}
	_, noExecute := m.untolerated(node, corev1.TaintEffectNoExecute)
	return Placement{Keep: !noExecute, Reason: "taint " + TaintString(taint) + " is not tolerated"}
}

func (m *Matcher) untolerated(node *corev1.Node, effects ...corev1.TaintEffect) (corev1.Taint, bool) {
	return schedulinghelpers.FindMatchingUntoleratedTaint(logr.Discard(), node.Spec.Taints, m.tolerations, func(t *corev1.Taint) bool {
		for _, e := range effects {
			if t.Effect == e {
				return true
			}
		}
		return false
	}, false)
}

// Eligible tells whether the DaemonSet controller would run a pod of this template on node:
// Decide(node).Run.
func (m *Matcher) Eligible(node *corev1.Node) bool {
	return m.Decide(node).Run
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

// TaintString is a taint as kubectl writes it: key=value:Effect, or key:Effect without a value.
func TaintString(t corev1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// OfPod is the node a daemon pod belongs to: its binding, or before scheduling the node the
// DaemonSet controller pins it to (matchFields metadata.name In [node]); "" for neither.
func OfPod(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

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
