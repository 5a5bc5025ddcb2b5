package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// countingLister lists the nodes it holds, a new copy each time as a cache does, and counts the
// lists; during names a function run in the middle of the next list.
type countingLister struct {
	mu     sync.Mutex
	nodes  []string
	fail   error
	lists  int
	during func()
}

func (l *countingLister) list(context.Context) ([]*corev1.Node, error) {
	l.mu.Lock()
	l.lists++
	during, fail, names := l.during, l.fail, append([]string(nil), l.nodes...)
	l.during = nil
	l.mu.Unlock()
	if during != nil {
		during()
	}
	if fail != nil {
		return nil, fail
	}
	out := make([]*corev1.Node, len(names))
	for i, name := range names {
		out[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	}
	return out, nil
}

func nodeNames(nodes []*corev1.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name
	}
	return out
}

// Reviews share one list of the nodes until a node changes; the review after a change sees
// the change; a list that failed is not kept.
func TestNodeSnapshotListsOncePerChange(t *testing.T) {
	tests := map[string]struct {
		// steps run in order on a snapshot over a cluster of nodes a and b: "review" asks for the
		// nodes, "add c" adds node c to the cluster and tells the snapshot (by its informer
		// handler), "fail" makes lists fail from then on, "recover" makes them succeed again.
		steps []string
		// lists is how many times the cluster was listed; last the nodes the last review saw
		// ("error" when it failed).
		lists int
		last  string
	}{
		"reviews without a change share the first list": {
			steps: []string{"review", "review", "review"}, lists: 1, last: "[a b]",
		},
		"the review after a change lists again and sees it": {
			steps: []string{"review", "add c", "review", "review"}, lists: 2, last: "[a b c]",
		},
		"several changes between reviews cost one list": {
			steps: []string{"review", "add c", "add c", "add c", "review"}, lists: 2, last: "[a b c c c]",
		},
		"a failed list is an error and is not kept": {
			steps: []string{"fail", "review"}, lists: 1, last: "error",
		},
		"after a failed list the next review lists again": {
			steps: []string{"fail", "review", "recover", "review", "review"}, lists: 2, last: "[a b]",
		},
		"a failed list after a change keeps no stale list": {
			steps: []string{"review", "add c", "fail", "review"}, lists: 2, last: "error",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cluster := &countingLister{nodes: []string{"a", "b"}}
			s := NewNodeSnapshot(cluster.list)
			handler := s.EventHandler()
			last := ""
			for _, step := range tc.steps {
				switch step {
				case "review":
					nodes, err := s.Nodes(context.Background())
					if last = fmt.Sprint(nodeNames(nodes)); err != nil {
						last = "error"
					}
				case "add c":
					cluster.nodes = append(cluster.nodes, "c")
					handler.OnAdd(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, false)
				case "fail":
					cluster.fail = errors.New("cache not synced")
				case "recover":
					cluster.fail = nil
				default:
					t.Fatalf("unknown step %q", step)
				}
			}
			if cluster.lists != tc.lists || last != tc.last {
				t.Errorf("listed %d times, last review saw %s; want %d times, %s", cluster.lists, last, tc.lists, tc.last)
			}
		})
	}
}

// Every kind of informer event is a change: an update (a node's labels or taints) and a delete
// as much as an add.
func TestNodeSnapshotEventsAreChanges(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	for name, event := range map[string]func(*NodeSnapshot){
		"add":    func(s *NodeSnapshot) { s.EventHandler().OnAdd(node, false) },
		"update": func(s *NodeSnapshot) { s.EventHandler().OnUpdate(node, node) },
		"delete": func(s *NodeSnapshot) { s.EventHandler().OnDelete(node) },
	} {
		t.Run(name, func(t *testing.T) {
			cluster := &countingLister{nodes: []string{"a"}}
			s := NewNodeSnapshot(cluster.list)
			_, _ = s.Nodes(context.Background())
			event(s)
			_, _ = s.Nodes(context.Background())
			if cluster.lists != 2 {
				t.Errorf("listed %d times, want 2: the %s did not take a new list", cluster.lists, name)
			}
		})
	}
}

// A change while a review lists may be missing from that list: the list is then not kept as
// current, and the next review lists again and sees the change.
func TestNodeSnapshotChangeDuringAList(t *testing.T) {
	cluster := &countingLister{nodes: []string{"a"}}
	s := NewNodeSnapshot(cluster.list)
	cluster.during = func() {
		cluster.mu.Lock()
		cluster.nodes = append(cluster.nodes, "b")
		cluster.mu.Unlock()
		s.Changed()
	}
	first, err := s.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(nodeNames(first), nodeNames(second), cluster.lists); got != "[a] [a b] 2" {
		t.Errorf("reviews saw %s, want [a] [a b] 2 (lists)", got)
	}
}

// Reviews and changes at once: every review gets a whole list, and once the changes stop the
// reviews see the last of them (run with -race).
func TestNodeSnapshotConcurrentReviews(t *testing.T) {
	cluster := &countingLister{nodes: []string{"a"}}
	s := NewNodeSnapshot(cluster.list)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if w == 0 && i%10 == 0 {
					cluster.mu.Lock()
					cluster.nodes = append(cluster.nodes, fmt.Sprint(i))
					cluster.mu.Unlock()
					s.Changed()
				}
				nodes, err := s.Nodes(context.Background())
				if err != nil || len(nodes) == 0 {
					t.Errorf("review got %d nodes, %v", len(nodes), err)
					return
				}
			}
		})
	}
	wg.Wait()
	nodes, err := s.Nodes(context.Background())
	if err != nil || len(nodes) != 21 {
		t.Errorf("after the changes a review got %d nodes (%v), want 21", len(nodes), err)
	}
}
