package rolloutplan

import (
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
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
	// Deleted holds the pods this process deleted, and when, until the cache shows them
	// terminating or gone: they count as terminating even while the cache lags.
	Deleted map[types.UID]time.Time
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
