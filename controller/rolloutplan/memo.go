package rolloutplan

import (
	"slices"
	"sync"

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
//     applied to every pod on every call, as StateOf applies it.
//   - The planner reads a RolloutState and does not change it.
//
// Invariants:
//   - m.StateOf(o) equals StateOf(o) but for the order of a node's pods, which StateOf takes from
//     the order of o.Pods, an informer's, in no fixed order (TestMemoStateOfIsStateOf).
//   - A node's Pods are replaced, never changed in place, so a state returned earlier keeps the
//     pods it had; each call returns its own Nodes.
//   - The memo holds the pods and nodes of the last call only: an entry not seen in a call is
//     dropped at its end, so its size follows the DaemonSet's pods and the cluster's nodes: about
//     4 MiB for a DaemonSet on 5,000 nodes.
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
	// template's.
	template    *corev1.PodSpec
	topologyKey string
	matcher     *nodes.Matcher
	// call counts the calls; an entry's seen is the last call that read its object.
	call uint64
	buf  []*memoNode // the nodes of a call, in order; reused
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
		m.template, m.topologyKey, m.nodes = template.DeepCopy(), o.Settings.TopologyKey, nil
		m.matcher = nodes.NewMatcher(m.template)
	}
	if m.pods == nil {
		m.pods, m.podsOn = map[string]*memoPod{}, map[string][]*memoPod{}
	}
	if m.nodes == nil {
		m.nodes = map[string]*memoNode{}
	}
	plain := plainClassifier{matcher: m.matcher, topologyKey: m.topologyKey}
	dirty := map[string]bool{} // nodes whose pods changed

	for _, p := range o.Pods {
		e := m.pods[p.Name]
		if e != nil && e.seen == m.call {
			return m.forget(o) // a second pod of that name: built by hand, no cache holds two
		}
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
			e.key, e.classified = key, classified
		}
		e.seen = m.call
		if st := markDeleted(e.classified, o.Deleted); st != e.state {
			e.state = st
			dirty[e.node] = true
		}
	}
	if len(m.pods) > len(o.Pods) {
		for name, e := range m.pods {
			if e.seen != m.call {
				m.leave(e, dirty)
				delete(m.pods, name)
			}
		}
	}

	in := stateOf(Observed{Now: o.Now, DaemonSet: o.DaemonSet, Settings: o.Settings, Status: o.Status,
		TargetRevision: o.TargetRevision, Measurements: o.Measurements, Revisions: o.Revisions}, plain)
	m.buf = m.buf[:0]
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
			e.key = key
			e.state, e.eligible = plain.node(n)
			dirty[n.Name] = true
		}
		e.seen = m.call
		m.buf = append(m.buf, e)
	}
	for name := range dirty {
		if e := m.nodes[name]; e != nil && e.eligible {
			e.state.Pods = m.podStates(name)
		}
	}
	in.Nodes = make([]NodeState, 0, len(m.buf))
	for _, e := range m.buf {
		if e.eligible {
			in.Nodes = append(in.Nodes, e.state)
		}
	}
	clear(m.buf) // the buffer keeps no entry alive
	if len(m.nodes) > len(o.Nodes) {
		for name, e := range m.nodes {
			if e.seen != m.call {
				delete(m.nodes, name)
			}
		}
	}
	return in
}

// forget empties the memo and classifies o without it: o is not what a cache holds.
func (m *Memo) forget(o Observed) RolloutState {
	m.pods, m.podsOn, m.nodes, m.template, m.buf = nil, nil, nil, nil, nil
	return StateOf(o)
}

// leave takes e off its node's pods.
func (m *Memo) leave(e *memoPod, dirty map[string]bool) {
	if e.node == "" {
		return
	}
	dirty[e.node] = true
	on := slices.DeleteFunc(slices.Clone(m.podsOn[e.node]), func(x *memoPod) bool { return x == e })
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
