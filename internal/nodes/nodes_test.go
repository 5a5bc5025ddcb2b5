package nodes

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDecide(t *testing.T) {
	node := func(labels map[string]string, taints ...corev1.Taint) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	cases := []struct {
		name string
		spec corev1.PodSpec
		node *corev1.Node
		want Placement
	}{
		{name: "runs", node: node(nil), want: Placement{Run: true, Keep: true}},
		{name: "another spec.nodeName", spec: corev1.PodSpec{NodeName: "m"}, node: node(nil), want: Placement{Reason: "spec.nodeName is m"}},
		{
			name: "node selector", spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "a"}}, node: node(map[string]string{"zone": "b"}),
			want: Placement{Reason: "nodeSelector zone=a does not match the node's labels"},
		},
		{
			name: "required affinity", node: node(map[string]string{"zone": "b"}),
			spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
			}}}},
			want: Placement{Reason: "required node affinity does not match the node's labels"},
		},
		{
			name: "an untolerated NoSchedule taint keeps the running pod", node: node(nil, corev1.Taint{Key: "gpu", Value: "x", Effect: corev1.TaintEffectNoSchedule}),
			want: Placement{Keep: true, Reason: "taint gpu=x:NoSchedule is not tolerated"},
		},
		{
			name: "an untolerated NoExecute taint does not", node: node(nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute}),
			want: Placement{Reason: "taint gpu:NoExecute is not tolerated"},
		},
		{
			name: "the DaemonSet controller's default tolerations count", node: node(nil, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}),
			want: Placement{Run: true, Keep: true},
		},
		{
			name: "a toleration", spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}},
			node: node(nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute}), want: Placement{Run: true, Keep: true},
		},
		{name: "PreferNoSchedule is no bar", node: node(nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectPreferNoSchedule}), want: Placement{Run: true, Keep: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewMatcher(&tc.spec).Decide(tc.node); got != tc.want {
				t.Fatalf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestOfPod(t *testing.T) {
	pinned := &corev1.Pod{Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}}}},
	}}}}}
	bound := pinned.DeepCopy()
	bound.Spec.NodeName = "n2"
	for pod, want := range map[*corev1.Pod]string{pinned: "n1", bound: "n2", {}: ""} {
		if got := OfPod(pod); got != want {
			t.Errorf("OfPod = %q, want %q", got, want)
		}
	}
}

func node(edit func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", ResourceVersion: "10", Labels: map[string]string{"zone": "a"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(time.Unix(100, 0))},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(time.Unix(100, 0))},
			},
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
		},
	}
	if edit != nil {
		edit(n)
	}
	return n
}

// Changed passes what the rollout controller replans on and nothing a heartbeat writes, on nodes
// as the API server sends them and as Strip keeps them.
func TestChanged(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*corev1.Node)
		want bool
	}{
		"a status heartbeat": {func(n *corev1.Node) {
			n.ResourceVersion = "11"
			for i := range n.Status.Conditions {
				n.Status.Conditions[i].LastHeartbeatTime = metav1.NewTime(time.Unix(200, 0))
			}
		}, false},
		"another condition, allocatable and annotations": {func(n *corev1.Node) {
			n.Status.Conditions[1].Status = corev1.ConditionTrue
			n.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
			n.Annotations = map[string]string{"other": "value"}
		}, false},
		"a label":              {func(n *corev1.Node) { n.Labels["zone"] = "b" }, true},
		"a taint":              {func(n *corev1.Node) { n.Spec.Taints = nil }, true},
		"cordoned":             {func(n *corev1.Node) { n.Spec.Unschedulable = true }, true},
		"NotReady":             {func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, true},
		"no Ready condition":   {func(n *corev1.Node) { n.Status.Conditions = n.Status.Conditions[1:] }, true},
		"deletion in progress": {func(n *corev1.Node) { n.DeletionTimestamp = &metav1.Time{Time: time.Unix(300, 0)} }, true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := Changed(node(nil), node(tc.edit)); got != tc.want {
				t.Errorf("Changed = %t, want %t", got, tc.want)
			}
			old, _ := Strip(node(nil))
			cur, _ := Strip(node(tc.edit))
			if got := Changed(old.(*corev1.Node), cur.(*corev1.Node)); got != tc.want {
				t.Errorf("Changed on stripped nodes = %t, want %t", got, tc.want)
			}
		})
	}
}
