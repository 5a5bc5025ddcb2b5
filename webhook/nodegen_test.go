package webhook

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNodeGenerationChangesWithWhatPoliciesSee(t *testing.T) {
	node := func(labels map[string]string, taints []corev1.Taint, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels, ResourceVersion: string(ready)},
			Spec:       corev1.NodeSpec{Taints: taints},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
		}
	}
	base := node(map[string]string{"zone": "a"}, nil, corev1.ConditionTrue)
	taint := []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	tests := []struct {
		name     string
		event    func(g *NodeGeneration)
		wantBump bool
	}{
		{"a node joins", func(g *NodeGeneration) { g.Added(base) }, true},
		{"a node leaves", func(g *NodeGeneration) { g.Deleted(base) }, true},
		{"a status write (heartbeat)", func(g *NodeGeneration) {
			g.Updated(base, node(map[string]string{"zone": "a"}, nil, corev1.ConditionFalse))
		}, false},
		{"a label changes", func(g *NodeGeneration) {
			g.Updated(base, node(map[string]string{"zone": "b"}, nil, corev1.ConditionTrue))
		}, true},
		{"a label is added", func(g *NodeGeneration) {
			g.Updated(base, node(map[string]string{"zone": "a", "x": ""}, nil, corev1.ConditionTrue))
		}, true},
		{"a taint is added", func(g *NodeGeneration) {
			g.Updated(base, node(map[string]string{"zone": "a"}, taint, corev1.ConditionTrue))
		}, true},
		{"not nodes (a tombstone)", func(g *NodeGeneration) { g.Updated(base, "tombstone") }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewNodeGeneration(nil)
			before, _ := g.Get()
			tt.event(g)
			after, ok := g.Get()
			if !ok {
				t.Fatal("a generation without a sync check is trusted at once")
			}
			if (after != before) != tt.wantBump {
				t.Errorf("generation %d -> %d, want a new one: %v", before, after, tt.wantBump)
			}
		})
	}
	synced := false
	g := NewNodeGeneration(func() bool { return synced })
	if _, ok := g.Get(); ok {
		t.Error("trusted before the informer synced")
	}
	synced = true
	if _, ok := g.Get(); !ok {
		t.Error("not trusted after the informer synced")
	}
}

// With a node generation, a cached validation is answered without listing the nodes; a new
// generation is evaluated against the new list; a list that cannot be read is never cached.
func TestDecisionCacheKeysValidationsByNodeGeneration(t *testing.T) {
	set := builtinSet(t)
	nodes, labels := factsNodes(5, "1"), map[string]string{}
	h := cacheHandlers(set, false, &nodes, &labels)
	uncached := cacheHandlers(set, true, &nodes, &labels)
	lists := 0
	var listErr error
	h.Facts.Nodes = func(context.Context) ([]*corev1.Node, error) { lists++; return nodes, listErr }
	gen := NewNodeGeneration(nil)
	h.Facts.NodesGeneration = gen.Get
	// maxUnavailable 4: denied on 5 nodes (at most 2 of the 4 matching), allowed on 9.
	body := review("apps", "v1", "DaemonSet", "CREATE", strings.Replace(seedObject, `"maxUnavailable":1`, `"maxUnavailable":4`, 1))

	first := answerOf(t, ValidateDaemonSetPath, h, body)
	if first.Allowed || lists != 1 {
		t.Fatalf("first request: %+v after %d node lists, want a denial after 1", first, lists)
	}
	if again := answerOf(t, ValidateDaemonSetPath, h, body); !reflect.DeepEqual(again, first) || lists != 1 {
		t.Errorf("same generation: %+v after %d node lists, want the cached denial without a list", again, lists)
	}

	nodes = factsNodes(9, "1")
	gen.Added(nodes[8])
	if a := answerOf(t, ValidateDaemonSetPath, h, body); !a.Allowed || !reflect.DeepEqual(a, answerOf(t, ValidateDaemonSetPath, uncached, body)) || lists != 2 {
		t.Errorf("new generation: %+v after %d node lists, want the evaluation on 9 nodes", a, lists)
	}

	gen.Deleted(nodes[8])
	listErr = errors.New("cache not ready")
	for i := range 2 {
		if a := answerOf(t, ValidateDaemonSetPath, h, body); lists != 3+i {
			t.Errorf("unreadable nodes, request %d: %+v after %d node lists, want every request to list (nothing cached)", i, a, lists)
		}
	}
}
