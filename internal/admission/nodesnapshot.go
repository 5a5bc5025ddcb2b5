package admission

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// NodeSnapshot is a Lookups.Nodes that every review shares: one list of the nodes, taken from
// list when a review first needs it and kept until a node is added, changed or removed (Changed,
// or the informer handler EventHandler). Listing a controller-runtime cache copies every node
// into the list it returns, so listing it per review cost each review the size of the node list
// (380 KB at 500 nodes, docs/performance.md); a snapshot is listed once per change of the nodes.
//
// A review sees the nodes as the cache had them when its snapshot was taken: an informer tells
// its handlers of a change after its cache holds it, so the first review after the handler ran
// takes a new snapshot, and a review may lag the cache by the handler's delivery, as the cache
// lags the API server. The list and its nodes are shared: readers must not modify them.
type NodeSnapshot struct {
	list func(context.Context) ([]*corev1.Node, error)
	// changes counts the changes of the nodes (Changed); a snapshot holds the count it was taken
	// at, and is current while the count has not moved.
	changes atomic.Uint64
	current atomic.Pointer[nodeList]
}

type nodeList struct {
	changes uint64
	nodes   []*corev1.Node
}

// NewNodeSnapshot returns a snapshot of the nodes list returns, for example a cache's
// (ReaderLookups(...).Nodes). Its nodes must not be modified while they are listed, as a cache's
// are not.
func NewNodeSnapshot(list func(context.Context) ([]*corev1.Node, error)) *NodeSnapshot {
	return &NodeSnapshot{list: list}
}

// Changed tells the snapshot that a node was added, changed or removed: the next review lists
// the nodes again.
func (s *NodeSnapshot) Changed() { s.changes.Add(1) }

// EventHandler is an informer handler that calls Changed on every event about a node.
func (s *NodeSnapshot) EventHandler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.Changed() },
		UpdateFunc: func(any, any) { s.Changed() },
		DeleteFunc: func(any) { s.Changed() },
	}
}

// Nodes is the Lookups.Nodes of the snapshot: the current list, or a new one when the nodes
// changed since it was taken. A list that fails is not kept: the next review tries again.
func (s *NodeSnapshot) Nodes(ctx context.Context) ([]*corev1.Node, error) {
	changes := s.changes.Load()
	if cur := s.current.Load(); cur != nil && cur.changes == changes {
		return cur.nodes, nil
	}
	nodes, err := s.list(ctx)
	if err != nil {
		return nil, err
	}
	taken := &nodeList{changes: changes, nodes: nodes}
	// Reviews that list at once keep the list of the latest count: a list taken before a change
	// never replaces one taken after it.
	for {
		cur := s.current.Load()
		if cur != nil && cur.changes >= changes {
			break
		}
		if s.current.CompareAndSwap(cur, taken) {
			break
		}
	}
	return nodes, nil
}
