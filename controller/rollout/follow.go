package rollout

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
)

// changes are the names of the pods and nodes that changed since each followed DaemonSet's last
// reconcile read them, as the informers' event handlers name them (podsOf, nodesOf), so that
// the next reconcile reads those alone and brings its memo up to date with them
// (rolloutplan.Memo.Follow) instead of listing every pod and node: at 1,000 nodes, reading and
// looking up every pod and node on each reconcile was a third of the controller's CPU during a
// rollout, on reconciles most of which follow a handful of changes.
//
// A DaemonSet is followed from a reconcile that reads everything (arm, before the read) until
// it is gone, no longer managed, or its reconcile stops before reading (drop). A name is marked
// in the event handler that enqueues the DaemonSet, before it enqueues it.
//
// Assumptions:
//   - An informer updates its store before it calls a handler, and controller-runtime's
//     EnqueueRequestsFromMapFunc calls the MapFunc before it adds the request: so a mark comes
//     after the store holds the change, and a reconcile comes after the mark.
//   - Reconciles of one DaemonSet never overlap (the work queue hands out a key once at a time).
//
// Invariants:
//   - Between reconciles of a followed DaemonSet, each pod and node is marked, or the memo
//     classifies what the store holds of it, or its handler has yet to run and will mark it and
//     then enqueue the DaemonSet. A reconcile that reads a name after its handler ran reads that
//     version or a newer one, so a duplicate mark costs a look-up and no mark is lost.
//   - A drain answers not ok once interval has passed since the arm, or the names overflowed
//     maxChangedNames: the reconcile then reads everything, which repairs anything an event
//     could have missed.
type changes struct {
	mu   sync.Mutex
	byDS map[types.NamespacedName]*dsChanges
	// interval is how long a DaemonSet is followed between reads of everything; negative never
	// reads everything while it is followed.
	interval time.Duration
}

// dsChanges are the names marked for one followed DaemonSet since its last reconcile.
type dsChanges struct {
	uid        types.UID
	armedAt    time.Time
	pods       map[string]struct{}
	nodes      map[string]struct{}
	overflowed bool
}

// maxChangedNames bounds the names kept per DaemonSet between two reconciles (a pod storm on a
// DaemonSet whose reconciles lag): past it, the names are dropped and the next reconcile reads
// everything, as it would without following.
const maxChangedNames = 20_000

// defaultFullReadInterval is how often a followed DaemonSet's reconcile reads everything: a net
// for anything an event could miss, at a small fraction of reading on every reconcile.
const defaultFullReadInterval = 30 * time.Second

func newChanges(interval time.Duration) *changes {
	if interval == 0 {
		interval = defaultFullReadInterval
	}
	return &changes{byDS: map[types.NamespacedName]*dsChanges{}, interval: interval}
}

// markPod marks the pod name of ds, if ds is followed.
func (c *changes) markPod(ds types.NamespacedName, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.byDS[ds]; d != nil {
		d.mark(d.pods, name)
	}
}

// markNode marks the node name for every followed DaemonSet: a node bears on every rollout.
func (c *changes) markNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.byDS {
		d.mark(d.nodes, name)
	}
}

func (d *dsChanges) mark(set map[string]struct{}, name string) {
	if d.overflowed {
		return
	}
	if len(d.pods)+len(d.nodes) >= maxChangedNames {
		d.overflowed = true
		clear(d.pods)
		clear(d.nodes)
		return
	}
	set[name] = struct{}{}
}

// arm follows ds (of this UID) from now, forgetting what was marked: its caller is about to read
// every pod and node.
func (c *changes) arm(ds types.NamespacedName, uid types.UID, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.byDS[ds]
	if d == nil {
		d = &dsChanges{pods: map[string]struct{}{}, nodes: map[string]struct{}{}}
		c.byDS[ds] = d
	}
	d.uid, d.armedAt, d.overflowed = uid, now, false
	clear(d.pods)
	clear(d.nodes)
}

// drain returns and forgets the names marked for ds since the last drain or arm; not ok when ds
// is not followed under this UID, the names overflowed, or the interval since the arm passed:
// the caller then reads everything (and arms first).
func (c *changes) drain(ds types.NamespacedName, uid types.UID, now time.Time) (pods, nodes []string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.byDS[ds]
	if d == nil || d.uid != uid || d.overflowed || (c.interval >= 0 && now.Sub(d.armedAt) >= c.interval) {
		return nil, nil, false
	}
	pods, nodes = make([]string, 0, len(d.pods)), make([]string, 0, len(d.nodes))
	for name := range d.pods {
		pods = append(pods, name)
	}
	for name := range d.nodes {
		nodes = append(nodes, name)
	}
	clear(d.pods)
	clear(d.nodes)
	return pods, nodes, true
}

// drop stops following ds.
func (c *changes) drop(ds types.NamespacedName) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byDS, ds)
}

// podsOf is f, the MapFunc of pod events, marking the pod for each DaemonSet f maps it to before
// the request is added. A nil tracker is f.
func (c *changes) podsOf(f handler.MapFunc) handler.MapFunc {
	if c == nil {
		return f
	}
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		reqs := f(ctx, obj)
		for _, req := range reqs {
			c.markPod(req.NamespacedName, obj.GetName())
		}
		return reqs
	}
}

// nodesOf is f, the MapFunc of node events, marking the node first for every followed
// DaemonSet (f may map the node to none, when it cannot list the DaemonSets). A nil tracker is
// f.
func (c *changes) nodesOf(f handler.MapFunc) handler.MapFunc {
	if c == nil {
		return f
	}
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		c.markNode(obj.GetName())
		return f(ctx, obj)
	}
}

// followingStore is a Store that reads pods and nodes by name, so that a reconcile reads what
// changed alone.
type followingStore interface {
	// changed reads the named pods of namespace and the named nodes as they are now: written if
	// present (a pod only if uid controls it), else gone.
	changed(namespace string, uid types.UID, pods, nodes []string) (rolloutplan.Changes, error)
}

func (s *informerStore) changed(namespace string, uid types.UID, pods, nodes []string) (rolloutplan.Changes, error) {
	var ch rolloutplan.Changes
	for _, name := range pods {
		obj, ok, err := s.pods.GetByKey(toolscache.NewObjectName(namespace, name).String())
		if err != nil {
			return ch, fmt.Errorf("read pod %s/%s: %w", namespace, name, err)
		}
		// Controlled by uid as the pod index by controller files it (controllerUIDs).
		if p, isPod := obj.(*corev1.Pod); ok && isPod && slices.Equal(controllerUIDs(p), []string{string(uid)}) {
			ch.Pods = append(ch.Pods, p)
		} else {
			ch.GonePods = append(ch.GonePods, name)
		}
	}
	for _, name := range nodes {
		obj, ok, err := s.nodes.GetByKey(name)
		if err != nil {
			return ch, fmt.Errorf("read node %s: %w", name, err)
		}
		if n, isNode := obj.(*corev1.Node); ok && isNode {
			ch.Nodes = append(ch.Nodes, n)
		} else {
			ch.GoneNodes = append(ch.GoneNodes, name)
		}
	}
	return ch, nil
}
