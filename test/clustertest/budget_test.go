package clustertest

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func readyNode(name string, taints ...corev1.Taint) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
}

func pod(name, node, image string, ready bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Image: image}}},
	}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	return p
}

// A rollout on two reachable nodes and one unreachable node, replayed as informer events: the
// sampler counts the reachable nodes only, after every event.
func TestBudgetSamplerCountsReachableNodesAfterEveryEvent(t *testing.T) {
	s := newBudgetSampler(SamplerOptions{})
	s.record(readyNode("a"), false)
	s.record(readyNode("b"), false)
	s.record(readyNode("gone", corev1.Taint{Key: corev1.TaintNodeUnreachable}), false)
	s.record(pod("a-1", "a", "v1", true), false)
	s.record(pod("b-1", "b", "v1", true), false)
	s.startSampling()

	s.record(pod("a-1", "a", "v1", true), true)   // a has no pod: 1 unavailable
	s.record(pod("a-2", "a", "v2", false), false) // not Ready yet
	s.record(pod("a-2", "a", "v2", true), false)
	s.record(pod("b-1", "b", "v1", true), true)
	s.record(pod("b-2", "b", "v2", true), false)

	if got := s.MaxUnavailable(); got != 1 {
		t.Errorf("MaxUnavailable = %d, want 1", got)
	}
	if want := "1 of 2 counted nodes (1 pods listed): a pod not Ready on [], only terminating pods on [], no pod on [a]"; s.Worst() != want {
		t.Errorf("Worst = %q, want %q", s.Worst(), want)
	}
	if got := s.Samples(); got != 6 {
		t.Errorf("Samples = %d, want 6 (the first and one per event after it)", got)
	}
	if got := s.MaxRunning("v2"); got != 2 {
		t.Errorf("MaxRunning(v2) = %d, want 2", got)
	}
	if got := s.ImagesSeenOn("a"); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("ImagesSeenOn(a) = %v, want [v1 v2]", got)
	}
}

// With SamplerOptions.Nodes the named nodes are counted whatever the node informer would say.
func TestBudgetSamplerCountsNamedNodes(t *testing.T) {
	s := newBudgetSampler(SamplerOptions{Nodes: []string{"a", "b", "c"}})
	s.record(pod("a-1", "a", "v1", true), false)
	s.startSampling()
	if got := s.MaxUnavailable(); got != 2 {
		t.Errorf("MaxUnavailable = %d, want 2 (b and c run no pod)", got)
	}
	terminating := pod("a-1", "a", "v1", true)
	terminating.DeletionTimestamp = &metav1.Time{}
	s.record(pod("b-1", "b", "v2", false), false) // still 2
	s.record(terminating, false)                  // 3: this sample is the worst
	s.record(pod("c-1", "c", "v2", false), false) // still 3
	if want := "3 of 3 counted nodes (2 pods listed): a pod not Ready on [b], only terminating pods on [a], no pod on [c]"; s.Worst() != want {
		t.Errorf("Worst = %q, want %q", s.Worst(), want)
	}
}
