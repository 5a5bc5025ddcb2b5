package nodes

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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
		want Verdict
	}{
		{name: "runs", node: node(nil), want: Verdict{Run: true, Keep: true}},
		{name: "another spec.nodeName", spec: corev1.PodSpec{NodeName: "m"}, node: node(nil), want: Verdict{Reason: "spec.nodeName is m"}},
		{
			name: "node selector", spec: corev1.PodSpec{NodeSelector: map[string]string{"zone": "a"}}, node: node(map[string]string{"zone": "b"}),
			want: Verdict{Reason: "nodeSelector zone=a does not match the node's labels"},
		},
		{
			name: "required affinity", node: node(map[string]string{"zone": "b"}),
			spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}},
			}}}},
			want: Verdict{Reason: "required node affinity does not match the node's labels"},
		},
		{
			name: "an untolerated NoSchedule taint keeps the running pod", node: node(nil, corev1.Taint{Key: "gpu", Value: "x", Effect: corev1.TaintEffectNoSchedule}),
			want: Verdict{Keep: true, Reason: "taint gpu=x:NoSchedule is not tolerated"},
		},
		{
			name: "an untolerated NoExecute taint does not", node: node(nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute}),
			want: Verdict{Reason: "taint gpu:NoExecute is not tolerated"},
		},
		{
			name: "the DaemonSet controller's default tolerations count", node: node(nil, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoExecute}),
			want: Verdict{Run: true, Keep: true},
		},
		{
			name: "a toleration", spec: corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists}}},
			node: node(nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectNoExecute}), want: Verdict{Run: true, Keep: true},
		},
		{name: "PreferNoSchedule is no bar", node: node(nil, corev1.Taint{Key: "gpu", Effect: corev1.TaintEffectPreferNoSchedule}), want: Verdict{Run: true, Keep: true}},
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
