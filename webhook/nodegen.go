package webhook

import (
	"reflect"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
)

// NodeGeneration numbers the versions of the node list as the policies see it: which nodes
// exist, and their labels and taints (what decides which nodes a DaemonSet targets). Feed it a
// node informer's events; Facts.NodesGeneration reads it. Status writes (heartbeats, conditions)
// leave the generation alone, so cached validations survive them.
type NodeGeneration struct {
	gen    atomic.Uint64
	synced func() bool
}

// NewNodeGeneration returns a generation that vouches for the node list once synced reports the
// informer synced (a nil synced: at once).
func NewNodeGeneration(synced func() bool) *NodeGeneration {
	return &NodeGeneration{synced: synced}
}

// Get returns the current generation, and whether it can be trusted yet.
func (g *NodeGeneration) Get() (uint64, bool) {
	return g.gen.Load(), g.synced == nil || g.synced()
}

// Added records a node joining.
func (g *NodeGeneration) Added(any) { g.gen.Add(1) }

// Deleted records a node leaving.
func (g *NodeGeneration) Deleted(any) { g.gen.Add(1) }

// Updated records a node write; only a change of labels or taints is a new generation.
func (g *NodeGeneration) Updated(oldObj, newObj any) {
	o, okOld := oldObj.(*corev1.Node)
	n, okNew := newObj.(*corev1.Node)
	if okOld && okNew && o.Name == n.Name && reflect.DeepEqual(o.Labels, n.Labels) && reflect.DeepEqual(o.Spec.Taints, n.Spec.Taints) {
		return
	}
	g.gen.Add(1)
}
