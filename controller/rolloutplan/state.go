package rolloutplan

import (
	"reflect"
	"slices"
	"sync"
	"time"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// PodState is what the planner knows of one pod of the DaemonSet.
type PodState struct {
	Name, UID   string
	Revision    string // controller-revision-hash label
	Terminating bool   // deletionTimestamp set (or deleted by us and not yet seen gone)
	DeletedAt   time.Time
	Ready       bool
	ReadySince  time.Time // lastTransitionTime of the Ready condition
	// NotReadySince is when a pod that is not Ready stopped being Ready (its Ready condition's
	// lastTransitionTime) or, without that condition, when it was created; zero when unknown.
	NotReadySince time.Time
	Failure       string // a container waiting reason that will not fix itself, e.g. ImagePullBackOff
}

// NodeState is one node the DaemonSet should run on, with its pods.
type NodeState struct {
	Name         string
	ControlPlane bool
	Domain       string // value of the topology-key label; empty without a topology key
	// Reachable is false when the node is not Ready or carries the unreachable/not-ready taint:
	// its kubelet will not act on a deletion, so the node is left out of the rollout.
	Reachable bool
	Pods      []PodState
}

// RolloutState is everything the planner needs: plain data and the reconcile's reading of the
// clock.
type RolloutState struct {
	// Name and Namespace of the DaemonSet, for the commands a message suggests.
	Name, Namespace string
	TargetRevision  string
	// Nodes are every node the DaemonSet targets, reachable or not: in rollout order
	// (rolloutCompare) as StateOf and a Memo give them, which spares the planner a sort; in any
	// other order the planner sorts them.
	Nodes           []NodeState
	Settings        rolloutapi.Settings
	MinReadySeconds int32
	// Status is the controller's memory as the status annotations hold it. The planner reads
	// Revision, Step.Index, StepStarted, PauseToken, FailedRevision, Progress and
	// ProgressUpdated; the rest is the last report, which the plan replaces.
	Status rolloutapi.Status
	// PreviousFailure is the reason of the Failed condition while it is True: why an earlier
	// reconcile halted the rollout, which later ones keep naming when the cause no longer shows
	// (a crash-looping pod between two crashes).
	PreviousFailure string
	// Measurements are the answers to DueAnalysis's request, taken by this reconcile; nil when
	// none was due.
	Measurements []rolloutanalysis.Measurement
	// KeptRevisions are the revision hashes whose ControllerRevision still exists: the templates
	// a rollback can put back (spec.revisionHistoryLimit prunes the rest).
	KeptRevisions []string
	Now           time.Time
}

// revisionLabel is the label the DaemonSet controller puts on pods and ControllerRevisions.
const revisionLabel = appsv1.DefaultDaemonSetUniqueLabelKey

// Observed is what the planner's RolloutState is classified from: the objects one reconcile (or
// one run of a forecast) read, plain data, no client.
type Observed struct {
	Now time.Time // the one reading of the clock
	// DaemonSet is as read: its annotations and conditions are the last report.
	DaemonSet *appsv1.DaemonSet
	Settings  rolloutapi.Settings
	// Status is the status annotations decoded; a malformed value is left out, and the rollout
	// resumes as if it had not been written.
	Status rolloutapi.Status
	// TargetRevision is the controller-revision-hash of the current template; "" while unknown,
	// and then Pods and Nodes are not read.
	TargetRevision string
	// Pods are the DaemonSet's pods and Nodes every node, shared with the cache: read only.
	Pods  []*corev1.Pod
	Nodes []*corev1.Node
	// Followed says that Pods and Nodes were not read: the Memo planning on o holds them, as its
	// last call read them brought up to date by Follow with what changed since (see Follow).
	Followed bool
	// Deleted holds the pods this process deleted, and when, until the cache shows them
	// terminating or gone: they count as terminating even while the cache lags.
	Deleted map[types.UID]time.Time
	// DeletedGen numbers Deleted for a Memo: a caller that never changes a Deleted it handed over
	// (it sets a new map instead) gives each new map a new number, so that a Memo marks again only
	// the pods it wrote while the number stays. 0 numbers nothing: every call marks every pod of
	// Deleted and of the last call's.
	DeletedGen uint64
	// Measurements are the analysis gates' measurements this reconcile took (DueAnalysis).
	Measurements []rolloutanalysis.Measurement
	// Revisions are the ControllerRevisions the DaemonSet controls, shared with the cache and
	// without their data (read only): a rollback can only put back a template one of them keeps.
	Revisions []*appsv1.ControllerRevision
}

// failureReasons are container waiting reasons that do not fix themselves without a new template.
var failureReasons = map[string]bool{
	"ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
}

// StateOf classifies what was read into the planner's RolloutState: the nodes the DaemonSet should
// run on (eligible), in rollout order, whether each is reachable, and each pod's revision,
// readiness and failure.
func StateOf(o Observed) RolloutState {
	return stateOf(o, plainClassifier{matcher: nodes.NewMatcher(&o.DaemonSet.Spec.Template.Spec), topologyKey: o.Settings.TopologyKey})
}

// classifier classifies one pod or node of a StateOf: directly (plainClassifier) or from what a
// Memo remembers of the same object, which plainClassifier classified.
type classifier interface {
	// pod is podState(p, nil) and the node p belongs to (nodes.OfPod).
	pod(p *corev1.Pod) (PodState, string)
	// node is nodeState of n, without its pods.
	node(n *corev1.Node) (NodeState, bool)
}

// plainClassifier classifies every object it is given.
type plainClassifier struct {
	matcher     *nodes.Matcher
	topologyKey string
}

func (c plainClassifier) pod(p *corev1.Pod) (PodState, string) {
	nodeName := nodes.OfPod(p)
	if nodeName == "" {
		return PodState{}, ""
	}
	return podState(p, nil), nodeName
}

func (c plainClassifier) node(n *corev1.Node) (NodeState, bool) {
	return nodeState(c.matcher, n, c.topologyKey)
}

// stateOf is StateOf with the classification of pods and nodes given.
func stateOf(o Observed, c classifier) RolloutState {
	ds := o.DaemonSet
	in := RolloutState{
		Name: ds.Name, Namespace: ds.Namespace,
		TargetRevision:  o.TargetRevision,
		Settings:        o.Settings,
		MinReadySeconds: ds.Spec.MinReadySeconds,
		Status:          o.Status,
		Measurements:    o.Measurements,
		Now:             o.Now,
	}
	for _, cr := range o.Revisions {
		in.KeptRevisions = append(in.KeptRevisions, cr.Labels[revisionLabel])
	}
	if c := ActiveCondition(ds.Status.Conditions); c != nil && c.Type == rolloutapi.ConditionFailed {
		in.PreviousFailure = c.Reason
	}
	// A node's pods start as a one-element window of states, so the usual node with one pod
	// costs no allocation of its own; a second pod appends past the window into a new array.
	// A forecast runs this about twice per node.
	podsByNode := make(map[string][]PodState, len(o.Nodes))
	states := make([]PodState, len(o.Pods))
	for i, p := range o.Pods {
		var nodeName string
		if states[i], nodeName = c.pod(p); nodeName != "" {
			states[i] = markDeleted(states[i], o.Deleted)
			if onNode, ok := podsByNode[nodeName]; ok {
				podsByNode[nodeName] = append(onNode, states[i])
			} else {
				podsByNode[nodeName] = states[i : i+1 : i+1]
			}
		}
	}
	in.Nodes = make([]NodeState, 0, len(o.Nodes))
	for _, n := range o.Nodes {
		if st, ok := c.node(n); ok {
			st.Pods = podsByNode[n.Name]
			in.Nodes = append(in.Nodes, st)
		}
	}
	slices.SortStableFunc(in.Nodes, func(a, b NodeState) int { return rolloutCompare(&a, &b) })
	return in
}

// nodeState is the planner's NodeState of n, without its pods, and whether the DaemonSet of m
// targets n at all (eligible).
func nodeState(m *nodes.Matcher, n *corev1.Node, topologyKey string) (NodeState, bool) {
	if !eligible(m, n) {
		return NodeState{}, false
	}
	_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
	return NodeState{Name: n.Name, ControlPlane: cp, Reachable: Reachable(n), Domain: topologyDomain(n, topologyKey)}, true
}

// podState is what the planner knows of p; a pod in deleted counts as terminating since then.
func podState(p *corev1.Pod, deleted map[types.UID]time.Time) PodState {
	s := PodState{Name: p.Name, UID: string(p.UID), Revision: p.Labels[revisionLabel]}
	if p.DeletionTimestamp != nil {
		s.Terminating, s.DeletedAt = true, p.DeletionTimestamp.Time
	}
	s.NotReadySince = p.CreationTimestamp.Time
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			s.Ready, s.ReadySince, s.NotReadySince = true, c.LastTransitionTime.Time, time.Time{}
		} else if !c.LastTransitionTime.IsZero() {
			s.NotReadySince = c.LastTransitionTime.Time
		}
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if w := list[i].State.Waiting; w != nil && failureReasons[w.Reason] {
				s.Failure = w.Reason
			}
		}
	}
	return markDeleted(s, deleted)
}

// markDeleted is s of a pod that deleted holds counting as terminating since it was deleted,
// until the cache shows its own deletionTimestamp.
func markDeleted(s PodState, deleted map[types.UID]time.Time) PodState {
	if at, ok := deleted[types.UID(s.UID)]; ok && !s.Terminating {
		s.Terminating, s.DeletedAt = true, at
	}
	return s
}

// StripPod is the cache transform that keeps of a pod what StateOf reads: the revision label,
// the node (bound, or pinned by affinity while unbound), the Ready condition and the reasons of
// waiting containers. The forecast strips its pods the same way, so it reads what the controller
// reads. The controller's cache holds every DaemonSet pod of the cluster this way, so what it
// keeps per pod sets most of the controller's memory on a large cluster.
func StripPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	p.ManagedFields, p.Annotations, p.GenerateName, p.Finalizers = nil, nil, "", nil
	// The planner reads one label; pods are found by controller, not by label selector.
	p.Labels = map[string]string{revisionLabel: p.Labels[revisionLabel]}
	slim := corev1.PodSpec{NodeName: p.Spec.NodeName}
	if slim.NodeName == "" {
		// The node the DaemonSet controller pinned it to (nodes.OfPod).
		slim.Affinity = p.Spec.Affinity
	}
	p.Spec = slim
	var status corev1.PodStatus
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for _, cs := range list {
			if cs.State.Waiting != nil {
				waiting := &corev1.ContainerStateWaiting{Reason: cs.State.Waiting.Reason}
				status.ContainerStatuses = append(status.ContainerStatuses, corev1.ContainerStatus{Name: cs.Name, State: corev1.ContainerState{Waiting: waiting}})
			}
		}
	}
	p.Status = status
	return p, nil
}

// eligible is the DaemonSet controller's "should continue running" (NodeShouldRunDaemonPod): the
// not-ready and unreachable NoSchedule taints of the node lifecycle controller keep new daemon pods
// off a node but not the pod it has, so such a node still belongs to the rollout. It is then
// left out as unreachable and reported, not silently dropped.
func eligible(m *nodes.Matcher, n *corev1.Node) bool {
	if m.Eligible(n) {
		return true
	}
	var kept []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != corev1.TaintNodeUnreachable && t.Key != corev1.TaintNodeNotReady {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(n.Spec.Taints) {
		return false
	}
	healthy := *n
	healthy.Spec.Taints = kept
	return m.Eligible(&healthy)
}

// Reachable is false when the node is not Ready or carries the unreachable or not-ready taint:
// its kubelet will not act on a deletion, so the rollout leaves the node out.
func Reachable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	return nodes.ReadyStatus(n) == corev1.ConditionTrue
}

func topologyDomain(n *corev1.Node, key string) string {
	if key == "" {
		return ""
	}
	return n.Labels[key]
}

// ActiveCondition is the True rollout condition of conds, nil when there is none.
func ActiveCondition(conds []appsv1.DaemonSetCondition) *appsv1.DaemonSetCondition {
	for i := range conds {
		c := &conds[i]
		if slices.Contains(rolloutapi.RolloutConditions, c.Type) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

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
//     pods it had; each StateOf returns its own Nodes (applied shares its own, see there, and
//     Compute and DueAnalysis lend them to the planner, and to no caller).
//   - The memo holds the pods and nodes of the last call only (as Follow brought them up to
//     date since): an entry not seen in a call is dropped at its end, so its size follows the
//     DaemonSet's pods and the cluster's nodes: about 4 MiB for a DaemonSet on 5,000 nodes, and
//     1.1 MiB more for the Nodes it lends, the planner's node views and its remembered node
//     classes, kept from one plan to the next rather than allocated by each (72, 48 and 112
//     bytes a node, and a node's old pods in a slice of their own).
//
// A caller that makes the changes itself (a forecast, whose simulated cluster changes only the
// pods it creates, deletes and makes Ready) names them (applied) instead of listing every object:
// the same entries, classified the same way, so that a run costs what changed, not every object.
// So does the controller, told by its informers' event handlers what changed between two
// reconciles (Follow), with a reconcile that reads everything now and then.
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
	// order are the eligible nodes in rollout order, the Nodes of a state (see reorder).
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
	// pods are marked again, as their deletion may be forgotten since. markedGen is its
	// DeletedGen.
	marked    []types.UID
	markedGen uint64
	// dirty are the names of the nodes whose pods changed in this call; reused.
	dirty map[string]bool
	// whole says that the memo holds what a cache holds of the DaemonSet of UID uid: a call read
	// every pod and node (update) and ended, and every Follow since ended too (see Follow).
	whole bool
	uid   types.UID
	// scratch is the planner's memory of Compute and DueAnalysis, reused from call to call.
	scratch scratch
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
	in, _, ok := m.current(o)
	if !ok {
		return in
	}
	in.Nodes = make([]NodeState, len(m.order))
	for i, e := range m.order {
		in.Nodes[i] = e.state
	}
	m.shared = nil // applied's Nodes are left as they were: the next one starts anew
	return in
}

// Compute is Compute(m.StateOf(o)), the plan made on the memo's own Nodes rather than a copy
// (at 5,000 nodes the copy was about 0.36 MB per reconcile), with the memo's scratch memory.
// The state is lent to the planner while it plans and to no one after: the plan holds strings
// and slices of its own, never the state's (as Compute's plan, which a forecast keeps while it
// changes the state it planned on).
func (m *Memo) Compute(o Observed) Plan {
	var plan Plan
	m.lend(o, func(in RolloutState, s *scratch) { plan = compute(in, s) })
	return plan
}

// DueAnalysis is DueAnalysis(m.StateOf(o)), lending the memo's Nodes as Compute does.
func (m *Memo) DueAnalysis(o Observed) *rolloutanalysis.Request {
	var req *rolloutanalysis.Request
	m.lend(o, func(in RolloutState, s *scratch) { req = dueAnalysis(in, s) })
	return req
}

// lend calls use with m.StateOf(o) whose Nodes are the memo's own (see applied), and the memo's
// scratch memory, under the memo's lock; a nil memo with StateOf(o) and no scratch.
func (m *Memo) lend(o Observed, use func(RolloutState, *scratch)) {
	if m == nil {
		use(StateOf(o), nil)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	in, dirty, ok := m.current(o)
	if ok {
		in.Nodes = m.sharedNodes(dirty)
	}
	// In rollout order either way: the memo's order (reorder), or StateOf's sort.
	m.scratch.inOrder = true
	use(in, &m.scratch)
}

// current is update(o), or for a followed o (Observed.Followed), which lists no pods and no nodes,
// the state of what the memo holds, Follow having brought it up to date: o's Deleted marked, the
// memo otherwise as it is. m.mu is held.
//
// Assumptions:
//   - A followed o comes after a Follow that accepted o's DaemonSet, with no call between (a
//     reconcile follows, then plans): the memo is whole, and o's template and topology key are
//     those its nodes were classified against.
func (m *Memo) current(o Observed) (in RolloutState, dirty map[string]bool, ok bool) {
	if !o.Followed {
		return m.update(o)
	}
	m.call++
	plain := m.plain()
	dirty = m.clearDirty()
	m.markDeleted(o.Deleted, o.DeletedGen, dirty)
	return m.state(o, plain, dirty), dirty, true
}

// update is StateOf(o) without its Nodes, the memo brought up to date with o, and the names of
// the nodes whose state changed since the last call (dirty); not ok when o is not what a cache
// holds, and then the memo is emptied and the state is StateOf(o), with its Nodes. m.mu is held.
func (m *Memo) update(o Observed) (in RolloutState, dirty map[string]bool, ok bool) {
	m.call++
	m.whole = false // until the end: a call that does not end leaves a memo Follow refuses
	template := &o.DaemonSet.Spec.Template.Spec
	if m.template == nil || m.topologyKey != o.Settings.TopologyKey || !sameTemplate(m.template, template) {
		m.template, m.topologyKey, m.nodes, m.nodeAt, m.order, m.shared = template.DeepCopy(), o.Settings.TopologyKey, nil, nil, nil, nil
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
	plain := m.plain()
	dirty = m.clearDirty()

	for _, p := range o.Pods {
		e := m.podAt[address(p)]
		if e == nil || e.name != p.Name {
			e = m.pods[p.Name]
		}
		if e != nil && e.seen == m.call {
			return m.forget(o), nil, false // a second pod of that name: built by hand, no cache holds two
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
	m.markDeleted(o.Deleted, o.DeletedGen, dirty)

	fresh := len(m.nodes) == 0
	for _, n := range o.Nodes {
		e := m.nodeAt[address(n)]
		if e == nil || e.name != n.Name {
			e = m.nodes[n.Name]
		}
		if e != nil && e.seen == m.call {
			return m.forget(o), nil, false // a second node of that name
		}
		m.writeNode(plain, n, e, fresh, dirty)
	}
	if len(m.nodes) > len(o.Nodes) {
		for _, e := range m.nodes {
			if e.seen != m.call {
				m.dropNode(e)
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
		m.shared = nil
	}
	m.whole, m.uid = true, o.DaemonSet.UID
	return m.state(o, plain, dirty), dirty, true
}

// writeNode takes n, the node of entry e (nil for a node the memo does not know) into the memo,
// classifying it when it changed since, and moving it in the rollout order unless the memo is
// fresh (update sorts a fresh memo's nodes once they are all written).
func (m *Memo) writeNode(plain plainClassifier, n *corev1.Node, e *memoNode, fresh bool, dirty map[string]bool) {
	if e == nil {
		e = &memoNode{name: n.Name}
		m.nodes[n.Name] = e
	}
	if at := address(n); e.at != at {
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

// dropNode takes e out of the memo and out of the rollout order; its pods stay, as a node's pods
// outlive it until the garbage collector deletes them.
func (m *Memo) dropNode(e *memoNode) {
	m.reorder(e, NodeState{}, false)
	delete(m.nodes, e.name)
	if m.nodeAt[e.at] == e {
		delete(m.nodeAt, e.at)
	}
}

// Changes are what changed among a DaemonSet's pods and the nodes since a Memo's last call, as a
// cache's event handlers named them, read from the cache once they were named: the objects as
// the cache holds them now, and the names of those it no longer holds.
type Changes struct {
	// Pods are the DaemonSet's pods created or changed; GonePods the names of its pods deleted or
	// no longer controlled by it.
	Pods     []*corev1.Pod
	GonePods []string
	// Nodes are the nodes created or changed; GoneNodes the names of the nodes deleted.
	Nodes     []*corev1.Node
	GoneNodes []string
}

// Follow brings the memo up to date with ch, the changes since its last call, so that a call
// with a followed Observed (Observed.Followed) plans on it without listing every pod and node:
// at 1,000 nodes, reading and looking up every pod and node was a third of the controller's CPU
// during a rollout, on reconciles most of which follow a handful of changes. It classifies the
// changed objects alone, as update would when they are listed with the others.
//
// It refuses (false, the memo unchanged) unless the memo is whole for o's DaemonSet: the last
// call read every object of that DaemonSet's UID and ended, as did every Follow since, no
// MustRead came between, and o's template and topology key are those the nodes were classified
// against (a new template, every rollout's start, classifies every node again). The caller then
// reads every object.
//
// Assumptions:
//   - ch names every pod and node that changed since the memo last read or followed (the
//     caller's event handlers name them; a name too many costs a look-up, one missing is a
//     change the memo never sees until the next call that reads everything).
//   - ch's objects are the DaemonSet's, read after they were named, so none is older than the
//     memo's version of it.
//
// Invariants:
//   - After Follow, m.StateOf of a followed o equals StateOf of o with every object the cache
//     holds (TestMemoFollowIsStateOf).
func (m *Memo) Follow(o Observed, ch Changes) bool {
	if m == nil {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.whole || m.uid != o.DaemonSet.UID || m.topologyKey != o.Settings.TopologyKey || !sameTemplate(m.template, &o.DaemonSet.Spec.Template.Spec) {
		return false
	}
	m.whole = false // until the end: a Follow that does not end leaves a memo that must read
	m.call++
	m.spec = &o.DaemonSet.Spec.Template.Spec
	plain := m.plain()
	dirty := m.clearDirty()
	m.take(plain, ch, o.Deleted, dirty)
	// The changed nodes' Pods now, so that a later call finds every node as its pods are, whatever
	// it is told of the changes (a call marks the pods of its own Deleted).
	m.regroup(dirty)
	if m.shared != nil {
		m.sharedNodes(dirty)
	}
	m.whole = true
	return true
}

// take writes ch's objects into the memo, classifying those that changed since, and drops the
// ones it names gone (after any write): the changes Follow is told of, and a forecast's (applied).
func (m *Memo) take(plain plainClassifier, ch Changes, deleted map[types.UID]time.Time, dirty map[string]bool) {
	for _, p := range ch.Pods {
		m.write(plain, p, m.pods[p.Name], deleted, dirty)
	}
	for _, name := range ch.GonePods {
		if e := m.pods[name]; e != nil {
			m.drop(e, dirty)
		}
	}
	for _, n := range ch.Nodes {
		m.writeNode(plain, n, m.nodes[n.Name], false, dirty)
	}
	for _, name := range ch.GoneNodes {
		if e := m.nodes[name]; e != nil {
			m.dropNode(e)
		}
	}
}

// plain is the classifier of the memo's template and topology key.
func (m *Memo) plain() plainClassifier {
	return plainClassifier{matcher: m.matcher, topologyKey: m.topologyKey}
}

// MustRead makes Follow refuse until a call has read every pod and node again: its caller drops
// the changes it was told of, to read every object instead.
func (m *Memo) MustRead() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.whole = false
	m.mu.Unlock()
}

// sameTemplate is equality.Semantic.DeepEqual(a, b), asked of reflect.DeepEqual first: equal
// values are semantically equal, and the template a reconcile reads is nearly always the last
// one's, which reflect.DeepEqual compares without allocating (the semantic comparison allocated
// about 50 times per reconcile, most of a reconcile's allocations by count).
func sameTemplate(a, b *corev1.PodSpec) bool {
	return reflect.DeepEqual(a, b) || equality.Semantic.DeepEqual(a, b)
}

// applied is StateOf(o) for a caller that names every change since the last call: o's DaemonSet
// is the last call's object, unchanged, its topology key and nodes the last call's, and its pods
// the last call's but for written (pods created, or changed with a new resourceVersion) and gone
// (names of pods deleted, gone after any write). It classifies the written pods alone, without a
// look at the others; false when the memo holds no last call of that DaemonSet (the caller then
// calls StateOf).
//
// Its Nodes are the memo's own, changed in place by the next applied, Compute or DueAnalysis (a
// StateOf leaves them be):
// a forecast plans on one state at a time, and copying every node on each of its runs cost as
// much as the rest of the run.
func (m *Memo) applied(o Observed, written []*corev1.Pod, gone []string) (RolloutState, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pods == nil || m.nodes == nil || m.spec != &o.DaemonSet.Spec.Template.Spec || m.topologyKey != o.Settings.TopologyKey {
		return RolloutState{}, false
	}
	m.call++
	m.whole = false // what a forecast simulates, not what a cache holds
	plain := m.plain()
	dirty := m.clearDirty()
	m.take(plain, Changes{Pods: written, GonePods: gone}, o.Deleted, dirty)
	m.markDeleted(o.Deleted, 0, dirty) // a forecast changes its Deleted as it goes
	in := m.state(o, plain, dirty)
	in.Nodes = m.sharedNodes(dirty)
	return in, true
}

// sharedNodes are the memo's own Nodes (m.shared) as the entries now are, dirty the names of the
// nodes whose state changed since they were last brought up to date: written in place, or made
// anew once the order changed (nil).
func (m *Memo) sharedNodes(dirty map[string]bool) []NodeState {
	if m.shared == nil {
		m.shared = make([]NodeState, len(m.order))
		for i, e := range m.order {
			e.shared, m.shared[i] = i, e.state
		}
		return m.shared
	}
	for name := range dirty {
		if e := m.nodes[name]; e != nil && e.eligible {
			m.shared[e.shared] = e.state
		}
	}
	return m.shared
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
// call's Deleted (see Memo), and remembers deleted's UIDs for the next call. When deleted is the
// last call's (gen, a DeletedGen other than 0, is the last call's), only the pods the call wrote
// may have changed, and write marked those: every other pod's state is what marking it gives,
// so nothing is marked again (a rollout's reconciles remember up to a minute of deletions, and
// looking each up on every reconcile cost 5% of the controller's CPU at 1,000 nodes).
func (m *Memo) markDeleted(deleted map[types.UID]time.Time, gen uint64, dirty map[string]bool) {
	if gen != 0 && gen == m.markedGen {
		return
	}
	m.markedGen = gen
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

// state is the RolloutState of o, without its Nodes, its pods and nodes as the memo holds them
// after a call, dirty the nodes whose pods changed.
func (m *Memo) state(o Observed, plain plainClassifier, dirty map[string]bool) RolloutState {
	in := stateOf(Observed{Now: o.Now, DaemonSet: o.DaemonSet, Settings: o.Settings, Status: o.Status,
		TargetRevision: o.TargetRevision, Measurements: o.Measurements, Revisions: o.Revisions}, plain)
	m.regroup(dirty)
	return in
}

// regroup brings the Pods of the dirty nodes' states up to date.
func (m *Memo) regroup(dirty map[string]bool) {
	for name := range dirty {
		if e := m.nodes[name]; e != nil && e.eligible {
			e.state.Pods = m.podStates(name)
		}
	}
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
	m.shared = nil // its index in shared is no longer its place
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
	m.byUID, m.uidClash, m.marked, m.markedGen, m.order, m.shared, m.whole = nil, false, nil, 0, nil, nil, false
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
