package localcluster

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestWorkerNodesSpreadOverZones(t *testing.T) {
	nodes := WorkerNodes("w", 7, "a", "b", "c")
	perZone := map[string]int{}
	for i, n := range nodes {
		if want := "w-" + string(rune('0'+i)); n.Name != want {
			t.Errorf("node %d named %q, want %q", i, n.Name, want)
		}
		if len(n.Taints) != 0 {
			t.Errorf("worker %s has taints %v", n.Name, n.Taints)
		}
		perZone[n.Labels[ZoneLabel]]++
	}
	// Round-robin: no zone holds more than one node above another.
	if perZone["a"] != 3 || perZone["b"] != 2 || perZone["c"] != 2 {
		t.Errorf("zones hold %v, want a:3 b:2 c:2", perZone)
	}
}

func TestDefaultNodesHaveOneTaintedControlPlane(t *testing.T) {
	var tainted []string
	for _, n := range DefaultNodes() {
		if len(n.Taints) > 0 {
			tainted = append(tainted, n.Name)
			if _, ok := n.Labels[ControlPlaneLabel]; !ok {
				t.Errorf("tainted node %s lacks the control-plane label", n.Name)
			}
			if n.Taints[0].Key != ControlPlaneLabel || n.Taints[0].Effect != corev1.TaintEffectNoSchedule {
				t.Errorf("control-plane taint is %v", n.Taints[0])
			}
		}
	}
	if len(DefaultNodes()) != 5 || len(tainted) != 1 {
		t.Errorf("got %d nodes with tainted %v, want 5 nodes with exactly one tainted", len(DefaultNodes()), tainted)
	}
}

func TestNodeSchedulable(t *testing.T) {
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}
	notReady := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse}
	tests := map[string]struct {
		conditions []corev1.NodeCondition
		taints     []corev1.Taint
		want       bool
	}{
		"ready and untainted":                      {conditions: []corev1.NodeCondition{ready}, want: true},
		"ready with a user taint":                  {conditions: []corev1.NodeCondition{ready}, taints: []corev1.Taint{{Key: ControlPlaneLabel, Effect: corev1.TaintEffectNoSchedule}}, want: true},
		"ready but not-ready taint not yet lifted": {conditions: []corev1.NodeCondition{ready}, taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}},
		"ready but unreachable taint":              {conditions: []corev1.NodeCondition{ready}, taints: []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoExecute}}},
		"not ready":                                {conditions: []corev1.NodeCondition{notReady}},
		"no conditions yet":                        {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{Spec: corev1.NodeSpec{Taints: tc.taints}, Status: corev1.NodeStatus{Conditions: tc.conditions}}
			if got := nodeSchedulable(n); got != tc.want {
				t.Errorf("nodeSchedulable = %v, want %v", got, tc.want)
			}
		})
	}
}
