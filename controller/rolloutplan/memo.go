package rolloutplan

import (
	"slices"
	"sync"
	"time"

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
// Assumptions:
//   - Every classification is podState's or nodeState's (plainClassifier) and markDeleted's: the
//     memo keeps their results, never a definition of its own.
//   - A node's classification depends on the node, the pod template (the Matcher) and the
//     topology key: the memo forgets every node when the template or the key differs from the
//     last call's. Deleted (the pods this process deleted) changes from call to call and is
//     applied to every pod on every call that has it, and on the call after (whose pods may
//     have left it), as StateOf applies it; a pod's state without it is its classification.
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
	// deleted is whether the last call's Deleted held a pod: every pod's state is then marked
	// again, as the deletion may be forgotten since.
	deleted bool
	// dirty are the names of the nodes whose pods changed in this call; reused.
	dirty map[string]bool
}

// memoKey is what tells one version of an object from another.
type memoKey struct {
	uid             types.UID
	resourceVersion string
}

type memoPod struct {
	key  memoKey
	seen uint64
	node string // nodes.OfPod; "" for a pod of no node
	// classified is podState(p, nil); state is it after markDeleted, as the node's Pods hold it.
	classified, state PodState
}

type memoNode struct {
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
		m.template, m.topologyKey, m.nodes, m.order = template.DeepCopy(), o.Settings.TopologyKey, nil, nil
		m.matcher = nodes.NewMatcher(m.template)
	}
	m.spec = template
	if m.pods == nil {
		m.pods, m.podsOn = make(map[string]*memoPod, len(o.Pods)), make(map[string][]*memoPod, len(o.Nodes))
	}
	if m.nodes == nil {
		m.nodes = make(map[string]*memoNode, len(o.Nodes))
	}
	plain := plainClassifier{matcher: m.matcher, topologyKey: m.topologyKey}
	dirty := m.clearDirty()

	mark := len(o.Deleted) > 0 || m.deleted
	for _, p := range o.Pods {
		e := m.pods[p.Name]
		if e != nil && e.seen == m.call {
			return m.forget(o) // a second pod of that name: built by hand, no cache holds two
		}
		m.write(plain, p, e, mark, o.Deleted, dirty)
	}
	if len(m.pods) > len(o.Pods) {
		for name, e := range m.pods {
			if e.seen != m.call {
				m.leave(e, dirty)
				delete(m.pods, name)
			}
		}
	}
	m.deleted = len(o.Deleted) > 0

	fresh := len(m.nodes) == 0
	for _, n := range o.Nodes {
		e := m.nodes[n.Name]
		if e != nil && e.seen == m.call {
			return m.forget(o) // a second node of that name
		}
		if key := (memoKey{n.UID, n.ResourceVersion}); e == nil || key != e.key || n.ResourceVersion == "" {
			if e == nil {
				e = &memoNode{}
				m.nodes[n.Name] = e
			}
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
		m.write(plain, p, m.pods[p.Name], false, o.Deleted, dirty)
	}
	for _, name := range gone {
		if e := m.pods[name]; e != nil {
			m.leave(e, dirty)
			delete(m.pods, name)
		}
	}
	if len(o.Deleted) > 0 || m.deleted {
		for _, e := range m.pods {
			m.mark(e, o.Deleted, dirty)
		}
	}
	m.deleted = len(o.Deleted) > 0
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
// classifying it when it changed since, and marks it deleted when mark.
func (m *Memo) write(plain plainClassifier, p *corev1.Pod, e *memoPod, mark bool, deleted map[types.UID]time.Time, dirty map[string]bool) {
	if e == nil {
		e = &memoPod{}
		m.pods[p.Name] = e
	}
	if key := (memoKey{p.UID, p.ResourceVersion}); e.seen == 0 || key != e.key || p.ResourceVersion == "" {
		classified, node := plain.pod(p)
		if node != e.node || e.seen == 0 {
			m.leave(e, dirty)
			e.node = node
			if node != "" {
				m.podsOn[node] = append(m.podsOn[node], e)
				dirty[node] = true
			}
		}
		e.key, e.classified, mark = key, classified, true
	}
	e.seen = m.call
	if mark {
		m.mark(e, deleted, dirty)
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
	m.pods, m.podsOn, m.nodes, m.template, m.spec, m.deleted = nil, nil, nil, nil, nil, false
	m.order, m.shared = nil, nil
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
