package rolloutplan

import (
	"slices"
	"sync"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/nodes"
)

// Memo remembers, from one StateOf of a DaemonSet to the next, how each of its pods and every
// node was classified and which pods each node has, so that a reconcile classifies and groups only
// the objects that changed since the last one: at 5,000 nodes StateOf's classifying and grouping of
// every node and pod, twice per reconcile, was most of the controller's CPU and allocations during
// a rollout, while one reconcile follows a handful of pod events.
//
// An object is known by its name, UID and resourceVersion: the API server gives every write of an
// object a new resourceVersion, and the cache's transforms (StripPod, nodes.Strip) keep a function
// of the object, so an object with the same three reads the same. One without a resourceVersion
// (built by hand, not read from the API server) is classified every time.
//
// An object is found by its address first (podAt, nodeAt), by its name only when that fails: the
// controller's Store hands out the informers' own objects, which a write replaces and never
// changes, so from one call to the next almost every object is at the same address, and hashing
// a pointer costs far less than hashing a name (at 1,000 nodes, looking up every pod and node
// by name was most of StateOf's CPU). The address is a hint, never an identity: the entry it
// finds is taken only if it has the object's name, and is then the name's entry, whose
// (UID, resourceVersion) decides as before; so an address the collector freed and gave to
// another object, or a Store that copies its objects on every call (readerStore, a cache
// limited to namespaces), costs a look-up by name and changes no result. The memo keeps
// addresses as numbers, which hold no object alive.
//
// Assumptions:
//   - Every classification is podState's or nodeState's (plainClassifier) and markDeleted's: the
//     memo keeps their results, never a definition of its own.
//   - A node's classification depends on the node, the pod template (the Matcher) and the
//     topology key: the memo forgets every node when the template or the key differs from the
//     last call's. Deleted (the pods this process deleted) changes from call to call: a call
//     marks the pods of its Deleted and of the last call's (which may have left it), found by
//     UID (byUID), as StateOf marks every pod; every other pod's state is its classification,
//     as it was after the last call. So a call costs what Deleted holds, not every pod: through
//     most of a rollout Deleted holds the last minute's deletions.
//   - The planner reads a RolloutState and does not change it.
//
// Invariants:
//   - m.StateOf(o) equals StateOf(o) but for the order of a node's pods, which StateOf takes from
//     the order of o.Pods, an informer's, in no fixed order (TestMemoStateOfIsStateOf). Its
//     Nodes are in rollout order, as StateOf's, kept from call to call (reorder) rather than
//     sorted on each.
//   - A node's Pods are replaced, never changed in place, so a state returned earlier keeps the
//     pods it had; each StateOf returns its own Nodes (applied shares its own, see there).
//   - The memo holds the pods and nodes of the last call only: an entry not seen in a call is
//     dropped at its end, so its size follows the DaemonSet's pods and the cluster's nodes: about
//     4 MiB for a DaemonSet on 5,000 nodes.
//
// A caller that makes the changes itself (a forecast, whose simulated cluster changes only the
// pods it creates, deletes and makes Ready) names them (applied) instead of listing every object:
// the same entries, classified the same way, so that a run costs what changed, not every object.
//
// A Memo serves one DaemonSet, one call at a time; the zero Memo is ready to use, and a nil
// *Memo classifies every object (StateOf).
type Memo struct {
	mu    sync.Mutex
	pods  map[string]*memoPod  // by name: a DaemonSet's pods share its namespace
	nodes map[string]*memoNode // by name
	// podAt and nodeAt are the entries by the address of their last object (see Memo): a slot
	// names an entry in pods or nodes whose at is the slot's address.
	podAt  map[uintptr]*memoPod
	nodeAt map[uintptr]*memoNode
	// podsOn are the pods of each node name, node or no node, in the order they came.
	podsOn map[string][]*memoPod
	// template and topologyKey are what the nodes were classified against, matcher the
	// template's; spec is the last call's template as given, for applied.
	template    *corev1.PodSpec
	topologyKey string
	matcher     *nodes.Matcher
	spec        *corev1.PodSpec
	// call counts the calls; an entry's seen is the last call that read its object.
	call uint64
	// order are the eligible nodes in rollout order, the Nodes of a state (see keepOrder).
	order []*memoNode
	// shared are the Nodes applied returns, changed in place from one applied to the next; nil
	// after a StateOf.
	shared []NodeState
	// byUID are the pods by UID, to mark those of Deleted without a look at the others; uidClash
	// is set once two pods may share a UID (built by hand: an API server gives each its own),
	// and then the index is built again, and every pod marked while two do.
	byUID    map[types.UID]*memoPod
	uidClash bool
	// marked are the UIDs of the last call's Deleted, copied (a caller may change its map): their
	// pods are marked again, as their deletion may be forgotten since.
	marked []types.UID
	// dirty are the names of the nodes whose pods changed in this call; reused.
	dirty map[string]bool
}

// memoKey is what tells one version of an object from another.
type memoKey struct {
	uid             types.UID
	resourceVersion string
}

type memoPod struct {
	name string
	at   uintptr // address of the last object read
	key  memoKey
	seen uint64
	node string // nodes.OfPod; "" for a pod of no node
	// classified is podState(p, nil); state is it after markDeleted, as the node's Pods hold it.
	classified, state PodState
}

type memoNode struct {
	name     string
	at       uintptr // address of the last object read
	key      memoKey
	seen     uint64
	eligible bool
	state    NodeState // nodeState, with the node's pods
	shared   int       // index of state in Memo.shared
}

// StateOf is StateOf(o), classifying only the pods and nodes the memo has not seen as they are,
// and grouping again only the pods of nodes whose pods changed.
func (m *Memo) StateOf(o Observed) RolloutState {
	if m == nil {
		return StateOf(o)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.call++
	template := &o.DaemonSet.Spec.Template.Spec
	if m.template == nil || m.topologyKey != o.Settings.TopologyKey || !equality.Semantic.DeepEqual(m.template, template) {
		m.template, m.topologyKey, m.nodes, m.nodeAt, m.order = template.DeepCopy(), o.Settings.TopologyKey, nil, nil, nil
		m.matcher = nodes.NewMatcher(m.template)
	}
	m.spec = template
	if m.pods == nil {
		m.pods, m.podsOn = make(map[string]*memoPod, len(o.Pods)), make(map[string][]*memoPod, len(o.Nodes))
		m.byUID, m.podAt = make(map[types.UID]*memoPod, len(o.Pods)), make(map[uintptr]*memoPod, len(o.Pods))
	}
	if m.nodes == nil {
		m.nodes, m.nodeAt = make(map[string]*memoNode, len(o.Nodes)), make(map[uintptr]*memoNode, len(o.Nodes))
	}
	plain := plainClassifier{matcher: m.matcher, topologyKey: m.topologyKey}
	dirty := m.clearDirty()

	for _, p := range o.Pods {
		e := m.podAt[address(p)]
		if e == nil || e.name != p.Name {
			e = m.pods[p.Name]
		}
		if e != nil && e.seen == m.call {
			return m.forget(o) // a second pod of that name: built by hand, no cache holds two
		}
		m.write(plain, p, e, o.Deleted, dirty)
	}
	if len(m.pods) > len(o.Pods) {
		for _, e := range m.pods {
			if e.seen != m.call {
				m.drop(e, dirty)
			}
		}
	}
	m.markDeleted(o.Deleted, dirty)

	fresh := len(m.nodes) == 0
	for _, n := range o.Nodes {
		at := address(n)
		e := m.nodeAt[at]
		if e == nil || e.name != n.Name {
			e = m.nodes[n.Name]
		}
		if e != nil && e.seen == m.call {
			return m.forget(o) // a second node of that name
		}
		if e == nil {
			e = &memoNode{name: n.Name}
			m.nodes[n.Name] = e
		}
		if e.at != at {
			if m.nodeAt[e.at] == e {
				delete(m.nodeAt, e.at)
			}
			e.at, m.nodeAt[at] = at, e
			e.name = n.Name // the same name, in the object's bytes: the next comparison is of pointers
		}
		if key := (memoKey{n.UID, n.ResourceVersion}); e.seen == 0 || key != e.key || n.ResourceVersion == "" {
			state, eligible := plain.node(n)
			if !fresh {
				m.reorder(e, state, eligible)
			}
			e.key, e.state, e.eligible = key, state, eligible
			dirty[n.Name] = true
		}
		e.seen = m.call
	}
	if len(m.nodes) > len(o.Nodes) {
		for name, e := range m.nodes {
			if e.seen != m.call {
				m.reorder(e, NodeState{}, false)
				delete(m.nodes, name)
				if m.nodeAt[e.at] == e {
					delete(m.nodeAt, e.at)
				}
			}
		}
	}
	if fresh {
		m.order = m.order[:0]
		for _, e := range m.nodes {
			if e.eligible {
				m.order = append(m.order, e)
			}
		}
		slices.SortFunc(m.order, compareNodes)
	}
	m.shared = nil
	return m.state(o, plain, dirty, true)
}

// applied is StateOf(o) for a caller that names every change since the last call: o's DaemonSet
// is the last call's object, unchanged, its topology key and nodes the last call's, and its pods
// the last call's but for written (pods created, or changed with a new resourceVersion) and gone
// (names of pods deleted, gone after any write). It classifies the written pods alone, without a
// look at the others; false when the memo holds no last call of that DaemonSet (the caller then
// calls StateOf).
//
// Its Nodes are the memo's own, changed in place by the next applied (a StateOf leaves them be):
// a forecast plans on one state at a time, and copying every node on each of its runs cost as
// much as the rest of the run.
func (m *Memo) applied(o Observed, written []*corev1.Pod, gone []string) (RolloutState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pods == nil || m.nodes == nil || m.spec != &o.DaemonSet.Spec.Template.Spec || m.topologyKey != o.Settings.TopologyKey {
		return RolloutState{}, false
	}
	m.call++
	plain := plainClassifier{matcher: m.matcher, topologyKey: m.topologyKey}
	dirty := m.clearDirty()
	for _, p := range written {
		m.write(plain, p, m.pods[p.Name], o.Deleted, dirty)
	}
	for _, name := range gone {
		if e := m.pods[name]; e != nil {
			m.drop(e, dirty)
		}
	}
	m.markDeleted(o.Deleted, dirty)
	in := m.state(o, plain, dirty, false)
	if m.shared == nil {
		m.shared = make([]NodeState, len(m.order))
		for i, e := range m.order {
			e.shared, m.shared[i] = i, e.state
		}
	} else {
		for name := range dirty {
			if e := m.nodes[name]; e != nil && e.eligible {
				m.shared[e.shared] = e.state
			}
		}
	}
	in.Nodes = m.shared
	return in, true
}

// write takes p, the pod of entry e (nil for a pod the memo does not know) into the memo,
// classifying it, and marking it with deleted, when it changed since.
func (m *Memo) write(plain plainClassifier, p *corev1.Pod, e *memoPod, deleted map[types.UID]time.Time, dirty map[string]bool) {
	if e == nil {
		e = &memoPod{name: p.Name}
		m.pods[p.Name] = e
	}
	if at := address(p); e.at != at {
		if m.podAt[e.at] == e {
			delete(m.podAt, e.at)
		}
		e.at, m.podAt[at] = at, e
		e.name = p.Name // the same name, in the object's bytes: the next comparison is of pointers
	}
	if key := (memoKey{p.UID, p.ResourceVersion}); e.seen == 0 || key != e.key || p.ResourceVersion == "" {
		if e.seen == 0 || key.uid != e.key.uid {
			m.index(e, key.uid)
		}
		classified, node := plain.pod(p)
		if node != e.node || e.seen == 0 {
			m.leave(e, dirty)
			e.node = node
			if node != "" {
				m.podsOn[node] = append(m.podsOn[node], e)
				dirty[node] = true
			}
		}
		e.key, e.classified = key, classified
		m.mark(e, deleted, dirty)
	}
	e.seen = m.call
}

// index files e under uid in byUID, no longer under its old UID.
func (m *Memo) index(e *memoPod, uid types.UID) {
	if m.byUID[e.key.uid] == e {
		delete(m.byUID, e.key.uid)
	}
	if other := m.byUID[uid]; other != nil && other != e {
		m.uidClash = true
	}
	m.byUID[uid] = e
}

// drop takes e out of the memo.
func (m *Memo) drop(e *memoPod, dirty map[string]bool) {
	m.leave(e, dirty)
	delete(m.pods, e.name)
	if m.byUID[e.key.uid] == e {
		delete(m.byUID, e.key.uid)
	}
	if m.podAt[e.at] == e {
		delete(m.podAt, e.at)
	}
}

// address is where obj is: a hint to find its entry (see Memo), never turned back into a pointer.
func address[T any](obj *T) uintptr { return uintptr(unsafe.Pointer(obj)) }

// markDeleted marks, once every pod of the call is written, the pods of deleted and of the last
// call's Deleted (see Memo), and remembers deleted's UIDs for the next call.
func (m *Memo) markDeleted(deleted map[types.UID]time.Time, dirty map[string]bool) {
	if m.uidClash {
		m.reindex()
	}
	if m.uidClash {
		for _, e := range m.pods {
			m.mark(e, deleted, dirty)
		}
	} else {
		for _, uid := range m.marked {
			if e := m.byUID[uid]; e != nil {
				m.mark(e, deleted, dirty)
			}
		}
		for uid := range deleted {
			if e := m.byUID[uid]; e != nil {
				m.mark(e, deleted, dirty)
			}
		}
	}
	m.marked = m.marked[:0]
	for uid := range deleted {
		m.marked = append(m.marked, uid)
	}
}

// reindex builds byUID again from the pods; uidClash stays set while two share a UID.
func (m *Memo) reindex() {
	clear(m.byUID)
	m.uidClash = false
	for _, e := range m.pods {
		if m.byUID[e.key.uid] != nil {
			m.uidClash = true
		}
		m.byUID[e.key.uid] = e
	}
}

// mark is e's state after markDeleted.
func (m *Memo) mark(e *memoPod, deleted map[types.UID]time.Time, dirty map[string]bool) {
	if st := markDeleted(e.classified, deleted); st != e.state {
		e.state = st
		dirty[e.node] = true
	}
}

// state is the RolloutState of o, its pods and nodes as the memo holds them after a call, dirty
// the nodes whose pods changed; without its Nodes unless withNodes.
func (m *Memo) state(o Observed, plain plainClassifier, dirty map[string]bool, withNodes bool) RolloutState {
	in := stateOf(Observed{Now: o.Now, DaemonSet: o.DaemonSet, Settings: o.Settings, Status: o.Status,
		TargetRevision: o.TargetRevision, Measurements: o.Measurements, Revisions: o.Revisions}, plain)
	for name := range dirty {
		if e := m.nodes[name]; e != nil && e.eligible {
			e.state.Pods = m.podStates(name)
		}
	}
	if withNodes {
		in.Nodes = make([]NodeState, len(m.order))
		for i, e := range m.order {
			in.Nodes[i] = e.state
		}
	}
	return in
}

// reorder keeps m.order, the eligible nodes in rollout order, as e becomes state (eligible or
// not): a node whose place changed is taken out at its old place and put in at its new one, each
// found by bisection, so that a call costs the nodes that changed, not a sort of every node.
//
// Assumptions:
//   - A node's place depends on its NodeState's ControlPlane, Domain and Name alone
//     (rolloutCompare), and its Reachable and Pods do not bear on it.
//   - Names are unique among the memo's nodes (a second node of a name empties the memo), so
//     rolloutCompare orders them strictly: the sorted order is the one order of them, whatever
//     the sort.
//
// Invariants:
//   - Before and after: m.order holds each eligible entry once, e.state as it is, strictly
//     increasing in rolloutCompare; e is taken out while e.state is still its old place.
//   - So the Nodes of a state are what a full sort of them gives (TestMemoKeepsRolloutOrder);
//     a memo that starts afresh (nothing known, or another template or topology key) sorts
//     them all once.
func (m *Memo) reorder(e *memoNode, state NodeState, eligible bool) {
	if e.eligible == eligible && (!eligible || compareNodes(&memoNode{state: state}, e) == 0) {
		return // its place is the same: Reachable or nothing changed
	}
	if e.eligible {
		i, found := slices.BinarySearchFunc(m.order, e, compareNodes)
		if !found || m.order[i] != e {
			i = slices.Index(m.order, e) // not where the invariant puts it: never twice, though
		}
		if i >= 0 {
			m.order = slices.Delete(m.order, i, i+1)
		}
	}
	if eligible {
		n := &memoNode{state: state}
		i, _ := slices.BinarySearchFunc(m.order, n, compareNodes)
		m.order = slices.Insert(m.order, i, e)
	}
}

// compareNodes is rolloutCompare of two entries' states.
func compareNodes(a, b *memoNode) int { return rolloutCompare(&a.state, &b.state) }

// clearDirty is m.dirty emptied.
func (m *Memo) clearDirty() map[string]bool {
	if m.dirty == nil {
		m.dirty = map[string]bool{}
	}
	clear(m.dirty)
	return m.dirty
}

// forget empties the memo and classifies o without it: o is not what a cache holds.
func (m *Memo) forget(o Observed) RolloutState {
	m.pods, m.podsOn, m.nodes, m.template, m.spec, m.podAt, m.nodeAt = nil, nil, nil, nil, nil, nil, nil
	m.byUID, m.uidClash, m.marked, m.order, m.shared = nil, false, nil, nil, nil
	return StateOf(o)
}

// leave takes e off its node's pods.
func (m *Memo) leave(e *memoPod, dirty map[string]bool) {
	if e.node == "" {
		return
	}
	dirty[e.node] = true
	on := slices.DeleteFunc(m.podsOn[e.node], func(x *memoPod) bool { return x == e })
	if len(on) == 0 {
		delete(m.podsOn, e.node)
	} else {
		m.podsOn[e.node] = on
	}
	e.node = ""
}

// podStates are the states of node's pods, a new slice; nil without pods, as StateOf leaves it.
func (m *Memo) podStates(node string) []PodState {
	on := m.podsOn[node]
	if len(on) == 0 {
		return nil
	}
	out := make([]PodState, len(on))
	for i, e := range on {
		out[i] = e.state
	}
	return out
}
