package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/nodes"
)

func TestEligibleKeepsNodesTheDaemonSetControllerKeepsRunningOn(t *testing.T) {
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	spec := &corev1.PodSpec{NodeSelector: map[string]string{"pool": "a"}}
	tests := map[string]struct {
		labels map[string]string
		taints []corev1.Taint
		want   bool
	}{
		"selected and untainted":                          {labels: map[string]string{"pool": "a"}, want: true},
		"selected and tainted unreachable":                {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{unreachable}, want: true},
		"selected and tainted not-ready":                  {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{notReady}, want: true},
		"unreachable but with a taint it never tolerated": {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{unreachable, dedicated}},
		"unreachable but not selected":                    {labels: map[string]string{"pool": "b"}, taints: []corev1.Taint{unreachable}},
		"a taint it never tolerated":                      {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{dedicated}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}, Spec: corev1.NodeSpec{Taints: tc.taints}}
			if got := eligible(nodes.NewMatcher(spec), n); got != tc.want {
				t.Errorf("eligible = %v, want %v", got, tc.want)
			}
			if len(n.Spec.Taints) != len(tc.taints) {
				t.Errorf("eligible changed the node's taints to %v", n.Spec.Taints)
			}
		})
	}
}
