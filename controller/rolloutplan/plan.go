package rolloutplan

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/controller/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/nodes"
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
	Nodes           []NodeState // every node the DaemonSet targets, reachable or not, in any order
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

// PodRef names a pod to delete; the UID is used as a precondition so a pod recreated under the
// same name is never deleted by mistake.
type PodRef struct {
	Name, UID, Node string
}

// Plan is the planner's decision for one reconcile.
type Plan struct {
	Delete  []PodRef
	Phase   rolloutapi.Phase
	Reason  string
	Message string
	// Status is the controller's memory after this plan and its report (step, counts, next
	// nodes), as the status annotations are to hold it.
	Status       rolloutapi.Status
	Updated      int // nodes whose pod runs the target revision and is available
	Desired      int // reachable nodes the rollout covers
	Unavailable  int // reachable nodes without an available pod, before this plan's deletions
	Budget       int
	Failures     []string      // "node: reason" for new-revision pods that fail
	Skipped      []string      // nodes left out: unreachable, or pods stuck terminating
	RequeueAfter time.Duration // when the plan would change without any event (pauses, deadlines)
	// Event is what the rollout's Event says when the phase, reason or step changes: the same
	// reason and message as the condition. The controller records it on a transition, and when
	// CauseChanged.
	Event Event
	// CauseChanged says that what holds the rollout changed while its phase and reason did not:
	// an inconclusive analysis now misses other data (other nodes, or no answer from Prometheus
	// instead of no sample). The same cause measured again is no change.
	CauseChanged bool
	// RollbackTo is the revision whose template the controller puts back, when a failed
	// analysis halts a rollout that opted in to roll back; "" otherwise.
	RollbackTo string
}

// Event is a rollout Event on the DaemonSet, worded by the planner (Plan.Event).
type Event struct {
	Type, Reason, Note string
	// FailureReason, when set, counts the Event in daemonguard_rollout_failures_total.
	FailureReason string
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
// run on (eligible), whether each is reachable, and each pod's revision, readiness and failure.
func StateOf(o Observed) RolloutState {
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
		if nodeName := nodes.OfPod(p); nodeName != "" {
			states[i] = podState(p, o.Deleted)
			if onNode, ok := podsByNode[nodeName]; ok {
				podsByNode[nodeName] = append(onNode, states[i])
			} else {
				podsByNode[nodeName] = states[i : i+1 : i+1]
			}
		}
	}
	matcher := nodes.NewMatcher(&ds.Spec.Template.Spec)
	in.Nodes = make([]NodeState, 0, len(o.Nodes))
	for _, n := range o.Nodes {
		if !eligible(matcher, n) {
			continue
		}
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		in.Nodes = append(in.Nodes, NodeState{
			Name: n.Name, ControlPlane: cp, Reachable: Reachable(n),
			Domain: topologyDomain(n, o.Settings.TopologyKey), Pods: podsByNode[n.Name],
		})
	}
	return in
}

// podState is what the planner knows of p; a pod in deleted counts as terminating since then.
func podState(p *corev1.Pod, deleted map[types.UID]time.Time) PodState {
	s := PodState{Name: p.Name, UID: string(p.UID), Revision: p.Labels[revisionLabel]}
	if p.DeletionTimestamp != nil {
		s.Terminating, s.DeletedAt = true, p.DeletionTimestamp.Time
	} else if at, ok := deleted[p.UID]; ok {
		s.Terminating, s.DeletedAt = true, at
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

// stuckTerminatingAfter is how long a pod may take to terminate before its node is treated like
// an unreachable one: reported and left out, instead of holding the budget forever.
const stuckTerminatingAfter = 5 * time.Minute

// nodeView classifies one reachable node against the target revision.
type nodeView struct {
	node        *NodeState
	newPod      *PodState // non-terminating pod at the target revision
	oldPods     []*PodState
	available   bool // some non-terminating pod is available
	newAvail    bool
	newFailure  string
	terminating bool // a pod of the node is terminating
}

// Compute decides which old-revision pods to delete now. It runs the named checks below in
// order; the first that decides the phase ends the plan. With analysis gates, a wave of new pods
// is measured (analyse, below) before the rollout completes or deletes more.
//
// Assumptions:
//   - The built-in DaemonSet controller, under OnDelete, recreates every deleted pod at the
//     current template revision (TargetRevision) and creates pods on new nodes.
//   - Nodes holds every node the DaemonSet targets; a targeted node with no pod is "missing".
//   - A pod is available when it has been Ready for MinReadySeconds and is not terminating.
//   - The caller treats pods it deleted but the cache still shows as running as Terminating.
//
// Invariants:
//   - A pod at the target revision is never deleted.
//   - Nothing is deleted while the rollout is paused, failed or analysing a wave: only replace
//     deletes, and it runs after every check that pauses, halts or holds.
//   - Pods on unreachable nodes are never deleted, and such nodes (and nodes whose pods are stuck
//     terminating) count neither as desired nor as unavailable (see newPlanner).
//   - At most budget nodes are unavailable after the plan, unless more were before (see replace).
func Compute(in RolloutState) Plan {
	p := newPlanner(in)
	if p.plan.Updated == p.plan.Desired && !p.awaitingAnalysis() {
		return p.complete()
	}
	if plan, halted := p.failed(); halted {
		return plan
	}
	if plan, held := p.analyse(); held {
		return plan
	}
	if p.plan.Updated == p.plan.Desired {
		return p.complete()
	}
	p.advanceSteps()
	if plan, held := p.paused(); held {
		return plan
	}
	if plan, halted := p.deadlinePassed(); halted {
		return plan
	}
	return p.replace()
}

// planner is one Compute under way: the input, the status it is deciding, the reachable nodes
// in rollout order and the plan so far.
type planner struct {
	in     RolloutState
	status rolloutapi.Status
	views  []nodeView // reachable nodes not stuck terminating, in rollout order
	plan   Plan
	// touched counts the nodes already moving to, or at, the new revision.
	touched int
}

// newPlanner restarts the status for a new template, classifies the nodes and counts them.
//
// Invariants:
//   - A new template (TargetRevision other than Status.Revision) restarts at the first step; a
//     failure of an older revision no longer applies, since rolling forward is how a failed
//     rollout is fixed, but FailedRevision is kept for the record.
//   - Unreachable nodes, and nodes whose only pods are stuck terminating, are Skipped: they count
//     neither as desired nor as unavailable, so they cannot block the rollout, and a node counts
//     at most once against the budget whatever pods it holds.
//   - Progress moves to Now whenever Updated grows: the progress deadline runs from the last
//     growth, so a long step that keeps moving never times out.
func newPlanner(in RolloutState) *planner {
	p := &planner{in: in, status: in.Status}
	restarted := p.status.Revision != in.TargetRevision
	if restarted {
		p.status = rolloutapi.Status{Revision: in.TargetRevision, StepStarted: in.Now, PauseToken: in.Settings.ResumeToken,
			FailedRevision: in.Status.FailedRevision, Progress: in.Now}
		if len(in.Settings.Gates) > 0 {
			// Pods already Ready at the new revision when its rollout begins (a rollback, nodes
			// updated by hand) ran before: the first wave is what this rollout replaces.
			p.status.Analysis = &rolloutapi.AnalysisStatus{VerifiedAt: in.Now}
		}
	}
	if len(in.Settings.Gates) == 0 {
		p.status.Analysis = nil
	}
	p.views, p.plan.Skipped = p.classifyNodes()
	if restarted && p.status.Analysis != nil && p.oldRevision() == "" {
		// A first revision replaces nothing: its pods are not a wave, as Argo Rollouts and
		// Flagger skip the analysis of an initial deployment.
		p.status.Analysis.NothingReplaced = true
	}
	p.plan.Desired = len(p.views)
	p.plan.Budget = rolloutapi.ResolveMaxUnavailable(in.Settings.MaxUnavailable, p.plan.Desired)
	for _, v := range p.views {
		if v.newAvail {
			p.plan.Updated++
		}
		if !v.available {
			p.plan.Unavailable++
		}
		if v.newPod != nil || len(v.oldPods) == 0 {
			p.touched++
		}
		if v.newPod != nil && v.newFailure != "" {
			p.plan.Failures = append(p.plan.Failures, v.node.Name+": "+v.newFailure)
		}
	}
	if p.status.Progress.IsZero() || p.plan.Updated > p.status.ProgressUpdated {
		p.status.Progress = in.Now
	}
	p.status.ProgressUpdated = p.plan.Updated
	return p
}

// classifyNodes is the reachable nodes not stuck terminating, in rollout order, and the nodes
// left out with why, sorted (Nodes may come in any order; the report does not).
func (p *planner) classifyNodes() ([]nodeView, []string) {
	minReady := time.Duration(p.in.MinReadySeconds) * time.Second
	available := func(pod *PodState) bool {
		return pod.Ready && !pod.Terminating && !p.in.Now.Before(pod.ReadySince.Add(minReady))
	}
	views := make([]nodeView, 0, len(p.in.Nodes))
	pods := 0
	for i := range p.in.Nodes {
		pods += len(p.in.Nodes[i].Pods)
	}
	// Every node's old pods are a window of one array, not an array each.
	old := make([]*PodState, 0, pods)
	var skipped []string
	for i := range p.in.Nodes {
		n := &p.in.Nodes[i]
		if !n.Reachable {
			skipped = append(skipped, n.Name+": node not ready or unreachable")
			continue
		}
		v := nodeView{node: n}
		first := len(old)
		stuck := len(n.Pods) > 0
		for j := range n.Pods {
			pod := &n.Pods[j]
			if pod.Terminating {
				v.terminating = true
				if pod.DeletedAt.IsZero() || p.in.Now.Sub(pod.DeletedAt) < stuckTerminatingAfter {
					stuck = false
				}
				continue
			}
			stuck = false
			if available(pod) {
				v.available = true
			}
			if pod.Revision == p.in.TargetRevision {
				v.newPod = pod
				v.newAvail = available(pod)
				v.newFailure = pod.Failure
			} else {
				old = append(old, pod)
			}
		}
		if len(old) > first {
			v.oldPods = old[first:len(old):len(old)]
		}
		if stuck {
			skipped = append(skipped, n.Name+": pod stuck terminating")
			continue
		}
		views = append(views, v)
	}
	slices.SortFunc(views, func(a, b nodeView) int { return rolloutCompare(a.node, b.node) })
	sort.Strings(skipped)
	return views, skipped
}

// complete ends a rollout whose every reachable node runs an available pod of the target
// revision: every step is done, and a failure recorded for the revision is cleared.
func (p *planner) complete() Plan {
	p.status.Step.Index = len(p.in.Settings.Steps)
	p.status.FailedRevision = ""
	msg := fmt.Sprintf("%d of %d nodes run revision %s", p.plan.Updated, p.plan.Desired, p.in.TargetRevision)
	return p.finish(rolloutapi.PhaseComplete, rolloutapi.ReasonComplete, msg+skippedNote(p.plan.Skipped))
}

// failed halts the rollout when a new pod fails, or keeps it halted when an earlier reconcile
// halted the target revision.
//
// Invariants:
//   - A new pod failing for a reason that does not fix itself (Failures) halts at once.
//   - A revision halted before stays halted, with the reason it was halted for. That reason
//     comes from the Failed condition, which is written after the status annotations: a
//     reconcile that sees the annotations first finds the deadline passed, or a gate's failed
//     measurement, in them.
func (p *planner) failed() (Plan, bool) {
	if len(p.plan.Failures) > 0 {
		return p.halt(rolloutapi.ReasonPodFailure, "new pods fail"), true
	}
	if p.status.FailedRevision != p.in.TargetRevision {
		return Plan{}, false
	}
	deadline := p.in.Settings.ProgressDeadline
	switch {
	case p.in.PreviousFailure == rolloutapi.ReasonPodFailure:
		return p.halt(rolloutapi.ReasonPodFailure, "new pods failed"), true
	case p.in.PreviousFailure == rolloutapi.ReasonAnalysisFailed:
		return p.halt(rolloutapi.ReasonAnalysisFailed, analysisFailedCause(p.status.Analysis)), true
	case p.in.PreviousFailure == rolloutapi.ReasonProgressDeadline || !p.in.Now.Before(p.status.Progress.Add(deadline)):
		return p.halt(rolloutapi.ReasonProgressDeadline, deadlineCause(deadline)), true
	case len(failedGates(p.status.Analysis)) > 0:
		// The annotations, written first, hold the failed measurement.
		return p.halt(rolloutapi.ReasonAnalysisFailed, analysisFailedCause(p.status.Analysis)), true
	}
	return p.halt(rolloutapi.ReasonRolloutFailed, "the rollout of revision "+p.in.TargetRevision+" failed"), true
}

// advanceSteps moves past completed steps and elapsed or resumed pauses.
//
// Invariants:
//   - A count or percent step is done once Updated reaches its target; a timed pause once its
//     duration has passed since the step started; an indefinite pause once the resume token
//     differs from the one it started with.
//   - Every step entered starts now: its StepStarted, Progress and PauseToken are reset.
//   - The rollout is not complete here, so the step index stays on a step: past the last one
//     (a node added after every step was done) it stays on the last step, which targets 100%.
func (p *planner) advanceSteps() {
	steps, s := p.in.Settings.Steps, p.in.Settings
	for p.status.Step.Index < len(steps) {
		st := steps[p.status.Step.Index]
		done := false
		switch st.Kind {
		case rolloutapi.StepTimedPause:
			done = !p.in.Now.Before(p.status.StepStarted.Add(st.Duration))
		case rolloutapi.StepPause:
			done = s.ResumeToken != p.status.PauseToken
		default:
			done = p.plan.Updated >= st.Target(p.plan.Desired)
		}
		if !done {
			break
		}
		p.status.Step.Index++
		p.status.StepStarted = p.in.Now
		p.status.Progress = p.in.Now
		p.status.PauseToken = s.ResumeToken
	}
	if p.status.Step.Index >= len(steps) {
		p.status.Step.Index = len(steps) - 1
	}
}

// paused holds the rollout under the paused annotation or at a pause step.
//
// Invariants:
//   - Time spent paused does not count against the progress deadline: Progress moves to Now.
//   - A timed pause comes back when it ends (RequeueAfter), and never says "0s more".
func (p *planner) paused() (Plan, bool) {
	idx := p.status.Step.Index
	st := p.in.Settings.Steps[idx]
	counts := fmt.Sprintf("%d of %d nodes updated", p.plan.Updated, p.plan.Desired)
	switch {
	case p.in.Settings.Paused:
		p.status.Progress = p.in.Now
		return p.finish(rolloutapi.PhasePaused, rolloutapi.ReasonPausedByAnnotation, fmt.Sprintf("step %s: paused by %s=true; %s; resume with: daemonguard rollout resume %s",
			p.stepLabel(idx), rolloutapi.AnnotationPaused, counts, p.dsArg())), true
	case st.Kind == rolloutapi.StepTimedPause:
		p.status.Progress = p.in.Now
		remaining := p.status.StepStarted.Add(st.Duration).Sub(p.in.Now)
		p.plan.RequeueAfter = remaining
		shown := (remaining + time.Second - 1).Truncate(time.Second)
		return p.finish(rolloutapi.PhasePaused, rolloutapi.ReasonTimedPause, fmt.Sprintf("step %s: waiting %s more; %s", p.stepLabel(idx), shown, counts)), true
	case st.Kind == rolloutapi.StepPause:
		p.status.Progress = p.in.Now
		return p.finish(rolloutapi.PhasePaused, rolloutapi.ReasonPausedAtStep, fmt.Sprintf("step %s: paused until %s changes; %s; resume with: daemonguard rollout resume %s",
			p.stepLabel(idx), rolloutapi.AnnotationResume, counts, p.dsArg())), true
	}
	return Plan{}, false
}

// deadlinePassed halts the rollout when Updated has not grown for the progress deadline;
// otherwise the plan comes back when the deadline would pass.
func (p *planner) deadlinePassed() (Plan, bool) {
	d := p.in.Settings.ProgressDeadline
	deadline := p.status.Progress.Add(d)
	if !p.in.Now.Before(deadline) {
		return p.halt(rolloutapi.ReasonProgressDeadline, deadlineCause(d)), true
	}
	p.plan.RequeueAfter = deadline.Sub(p.in.Now)
	return Plan{}, false
}

// replace picks the old pods to delete now and reports the rollout as progressing.
//
// Invariants:
//   - Let U be the reachable nodes without an available pod. Old pods that are already
//     unavailable are replaced first without budget (deleting them makes nothing less
//     available), as upstream's rollingUpdate does. An available old pod is deleted only while
//     U < budget, and each such deletion adds one to U: after the plan U <= max(U before, budget).
//   - At most Target(step) nodes are brought to the new revision by the current step: deletions
//     of available pods stop at the step's target.
//   - With a topology key, available old pods are deleted only in the first domain, in rollout
//     order, that is not fully updated: one domain at a time.
//   - NextNodes names at most five nodes that wait, in the order they will be replaced.
func (p *planner) replace() Plan {
	s := p.in.Settings
	unavailable := p.plan.Unavailable
	var candidates []*nodeView // into p.views, not copies: a forecast plans about twice per node
	domain := currentDomain(p.views, s.TopologyKey != "")
	for i := range p.views {
		v := &p.views[i]
		if len(v.oldPods) == 0 || v.newPod != nil {
			continue
		}
		if !v.available {
			p.deleteOld(v)
			continue
		}
		if s.TopologyKey == "" || v.node.Domain == domain {
			candidates = append(candidates, v)
		}
	}
	target := s.Steps[p.status.Step.Index].Target(p.plan.Desired)
	const nextShown = 5
	var next []string
	for _, v := range candidates {
		if unavailable >= p.plan.Budget || p.touched >= target {
			if len(next) < nextShown {
				next = append(next, v.node.Name)
			}
			continue
		}
		p.deleteOld(v)
		unavailable++
	}
	p.status.NextNodes, p.status.NextReason = next, orderReason(s.TopologyKey, domain)
	msg := fmt.Sprintf("step %s: %d of %d nodes updated, %d unavailable of budget %d", p.stepLabel(p.status.Step.Index), p.plan.Updated, p.plan.Desired, p.plan.Unavailable, p.plan.Budget)
	if len(p.plan.Delete) > 0 {
		msg += fmt.Sprintf("; replacing pods on %s", nodesOf(p.plan.Delete))
	}
	if len(next) > 0 {
		msg += "; next: " + strings.Join(next, ", ")
	}
	return p.finish(rolloutapi.PhaseProgressing, rolloutapi.ReasonProgressing, msg+skippedNote(p.plan.Skipped))
}

// deleteOld plans the deletion of every old pod of v's node, which then moves to the new revision.
func (p *planner) deleteOld(v *nodeView) {
	for _, pod := range v.oldPods {
		p.plan.Delete = append(p.plan.Delete, PodRef{Name: pod.Name, UID: pod.UID, Node: v.node.Name})
	}
	p.touched++
}

// halt fails the rollout of the target revision: nothing more is deleted until a new template
// rolls forward.
func (p *planner) halt(reason, cause string) Plan {
	p.status.FailedRevision = p.in.TargetRevision
	idx := min(p.status.Step.Index, len(p.in.Settings.Steps)-1)
	return p.finish(rolloutapi.PhaseFailed, reason, haltMessage(p.stepLabel(idx), cause, p.views, p.plan.Desired, p.dsArg()))
}

// finish completes the plan with its phase and the status to report. The step position, the
// counts and the next nodes are the report of this plan, never the last one's.
func (p *planner) finish(phase rolloutapi.Phase, reason, msg string) Plan {
	p.status.Step = p.position(p.status.Step.Index)
	p.status.Counts = &rolloutapi.Counts{Updated: p.plan.Updated, Desired: p.plan.Desired}
	if phase != rolloutapi.PhaseProgressing {
		p.status.NextNodes, p.status.NextReason = nil, ""
	}
	p.plan.Phase, p.plan.Reason, p.plan.Message, p.plan.Status = phase, reason, msg, p.status
	p.plan.Event = rolloutEvent(phase, reason, msg)
	return p.plan
}

// position is step i as the status reports it.
func (p *planner) position(i int) rolloutapi.StepPosition {
	steps := p.in.Settings.Steps
	if i >= len(steps) {
		return rolloutapi.StepPosition{Index: len(steps), Count: len(steps)}
	}
	return rolloutapi.StepPosition{Index: i, Count: len(steps), Spec: steps[i].Text}
}

// stepLabel names step i in messages: "3/5 (25%)", "5/5 (done)".
func (p *planner) stepLabel(i int) string {
	pos := p.position(i)
	return pos.Position() + " (" + pos.Label() + ")"
}

// dsArg is the DaemonSet as the daemonguard CLI takes it.
func (p *planner) dsArg() string {
	return fmt.Sprintf("ds/%s -n %s", p.in.Name, p.in.Namespace)
}

// rolloutCompare is the rollout order, deterministic and explainable: workers before
// control-plane nodes, then by topology domain, then by name.
func rolloutCompare(a, b *NodeState) int {
	if a.ControlPlane != b.ControlPlane {
		if a.ControlPlane {
			return 1
		}
		return -1
	}
	if c := strings.Compare(a.Domain, b.Domain); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// currentDomain is the first domain, in rollout order, that still has nodes to update: one
// domain is finished (updated and available) before the next is touched.
func currentDomain(views []nodeView, enabled bool) string {
	if !enabled {
		return ""
	}
	for _, v := range views {
		if !v.newAvail {
			return v.node.Domain
		}
	}
	return ""
}

func orderReason(topologyKey, domain string) string {
	if topologyKey != "" {
		return fmt.Sprintf("one %s at a time (now %q), workers before control-plane nodes, then by name", topologyKey, domain)
	}
	return "workers before control-plane nodes, then by name"
}

func nodesOf(refs []PodRef) string {
	seen := map[string]bool{}
	var names []string
	for _, r := range refs {
		if !seen[r.Node] {
			seen[r.Node] = true
			names = append(names, r.Node)
		}
	}
	return strings.Join(names, ", ")
}

// deadlineCause says that the progress deadline passed, and how long it is.
func deadlineCause(d time.Duration) string {
	return fmt.Sprintf("new pods not Ready within the progress deadline of %s", d)
}

// haltMessage is the message of every halted rollout: the step, the cause, the nodes whose new
// pods are not available (the first few, a count, and since when), and what to do about it.
func haltMessage(step, cause string, views []nodeView, desired int, ds string) string {
	var issues []string
	for _, v := range views {
		if issue := nodeIssue(v); issue != "" {
			issues = append(issues, issue)
		}
	}
	nodes := "no new pod is unavailable now"
	if len(issues) > 0 {
		nodes = fmt.Sprintf("new pods not available on %d of %d nodes: %s", len(issues), desired, kubetext.List(issues))
	}
	return fmt.Sprintf("step %s: %s; %s; no further pods are replaced; fix the template and apply it to roll forward, or roll back with: daemonguard rollout undo %s",
		step, cause, nodes, ds)
}

// nodeIssue says why a node that is moving to the new revision has no available pod of it, and
// since when: "worker-3: ImagePullBackOff since 2026-11-25T10:00:03Z". It is empty for a node
// that is not moving yet, or whose new pod is available.
func nodeIssue(v nodeView) string {
	since := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return " since " + t.UTC().Format(time.RFC3339)
	}
	p := v.newPod
	switch {
	case p == nil && len(v.oldPods) == 0 && !v.available:
		return v.node.Name + ": no pod yet"
	case p == nil || v.newAvail:
		return ""
	case p.Failure != "":
		return v.node.Name + ": " + p.Failure + since(p.NotReadySince)
	case p.Ready:
		return v.node.Name + ": Ready" + since(p.ReadySince) + ", not yet for minReadySeconds"
	}
	return v.node.Name + ": not Ready" + since(p.NotReadySince)
}

// rolloutEvent is the Event a rollout's phase change records: the condition's reason and
// message, a warning for a failure, which also counts in daemonguard_rollout_failures_total.
func rolloutEvent(phase rolloutapi.Phase, reason, msg string) Event {
	switch phase {
	case rolloutapi.PhaseFailed:
		return Event{Type: corev1.EventTypeWarning, Reason: rolloutapi.EventFailed, Note: reason + ": " + msg, FailureReason: reason}
	case rolloutapi.PhaseComplete:
		return Event{Type: corev1.EventTypeNormal, Reason: rolloutapi.EventComplete, Note: msg}
	case rolloutapi.PhasePaused:
		return Event{Type: corev1.EventTypeNormal, Reason: rolloutapi.EventPaused, Note: msg}
	}
	return Event{Type: corev1.EventTypeNormal, Reason: rolloutapi.EventProgressing, Note: msg}
}

func skippedNote(skipped []string) string {
	if len(skipped) == 0 {
		return ""
	}
	return fmt.Sprintf("; %d nodes left out (%s)", len(skipped), strings.Join(skipped, "; "))
}

// --- analysis gates: measuring each wave before the rollout goes on ---

// maxBaselineNodes bounds the nodes a baseline query names: enough for a median that one odd
// node does not move, and a query that stays short on a large cluster.
const maxBaselineNodes = 20

// DueAnalysis is the measurement a reconcile must take before Compute, or nil when none is due.
// It decides from the same state, with the same planner, as Compute: the wave, the baseline and
// which gates are due are Compute's.
func DueAnalysis(in RolloutState) *rolloutanalysis.Request {
	p := newPlanner(in)
	if p.status.FailedRevision == in.TargetRevision {
		return nil
	}
	wave := p.wave()
	if len(wave) == 0 || p.moving() > 0 {
		return nil
	}
	a := p.analysisOf(wave)
	vars := p.queryVars()
	baseline := p.baseline(wave)
	req := rolloutanalysis.Request{Wave: wave}
	for i, g := range in.Settings.Gates {
		if in.Now.Before(a.Gates[i].Next) {
			continue
		}
		q := rolloutanalysis.GateQuery{Gate: g.Name, NodeLabel: g.NodeLabel, Wave: rolloutapi.RenderQuery(g.Query, vars(wave))}
		if g.Baseline && len(baseline) > 0 {
			q.Baseline = rolloutapi.RenderQuery(g.Query, vars(baseline))
			req.BaselineNodes = baseline
		}
		req.Queries = append(req.Queries, q)
	}
	if len(req.Queries) == 0 {
		return nil
	}
	return &req
}

// awaitingAnalysis tells a rollout with gates whose last wave has not passed them yet.
func (p *planner) awaitingAnalysis() bool {
	return len(p.in.Settings.Gates) > 0 && len(p.wave()) > 0
}

// wave is the nodes the next analysis measures, in rollout order: nodes whose new pod is
// available and became Ready at or after the last wave passed (or the revision's rollout began).
// Without gates there is no wave.
func (p *planner) wave() []string {
	if len(p.in.Settings.Gates) == 0 {
		return nil
	}
	var since time.Time
	if a := p.status.Analysis; a != nil {
		if a.NothingReplaced {
			return nil
		}
		since = a.VerifiedAt
	}
	var wave []string
	for _, v := range p.views {
		if v.newAvail && !v.newPod.ReadySince.Before(since) {
			wave = append(wave, v.node.Name)
		}
	}
	return wave
}

// moving counts the nodes on their way to the new revision: a pod deleted or terminating, a new
// pod not yet available, or no pod yet. A wave is measured once none is left.
func (p *planner) moving() int {
	n := 0
	for _, v := range p.views {
		if !v.newAvail && (v.newPod != nil || v.terminating || (len(v.oldPods) == 0 && !v.available)) {
			n++
		}
	}
	return n
}

// baseline is the nodes a baseline gate compares the wave with, in rollout order, at most
// maxBaselineNodes: available old-revision nodes of the wave's topology domain; else every
// available old-revision node; else the nodes that passed an earlier wave.
func (p *planner) baseline(wave []string) []string {
	inWave := map[string]bool{}
	for _, n := range wave {
		inWave[n] = true
	}
	domain := ""
	for _, v := range p.views {
		if inWave[v.node.Name] {
			domain = v.node.Domain
			break
		}
	}
	pick := func(keep func(v *nodeView) bool) []string {
		var out []string
		for i := range p.views {
			v := &p.views[i]
			if !inWave[v.node.Name] && keep(v) && len(out) < maxBaselineNodes {
				out = append(out, v.node.Name)
			}
		}
		return out
	}
	old := func(v *nodeView) bool { return v.available && v.newPod == nil && len(v.oldPods) > 0 }
	if p.in.Settings.TopologyKey != "" {
		if nodes := pick(func(v *nodeView) bool { return old(v) && v.node.Domain == domain }); len(nodes) > 0 {
			return nodes
		}
	}
	if nodes := pick(old); len(nodes) > 0 {
		return nodes
	}
	return pick(func(v *nodeView) bool { return v.newAvail })
}

// queryVars are the placeholders' values for a list of nodes.
func (p *planner) queryVars() func(nodes []string) rolloutapi.QueryVars {
	old := p.oldRevision()
	return func(nodes []string) rolloutapi.QueryVars {
		return rolloutapi.QueryVars{Nodes: nodes, Revision: p.in.TargetRevision, OldRevision: old, Name: p.in.Name, Namespace: p.in.Namespace}
	}
}

// oldRevision is the revision most old pods run, the smallest on a tie; "" when none is left.
func (p *planner) oldRevision() string {
	counts := map[string]int{}
	for _, v := range p.views {
		for _, pod := range v.oldPods {
			counts[pod.Revision]++
		}
	}
	best := ""
	for rev, n := range counts {
		if best == "" || n > counts[best] || (n == counts[best] && rev < best) {
			best = rev
		}
	}
	return best
}

// analysisOf is the analysis status for wave: the one under way, or a new one that starts now
// when none is, or when the wave grew or shrank since it started (a measurement must cover every
// node it judges). Every gate's first measurement is due one interval after the start, so that
// the new pods' series exist and rate windows cover them. A new analysis keeps the gates' last
// measurements, for the report, but not their counts: passed or inconclusive, they were of
// another wave.
func (p *planner) analysisOf(wave []string) rolloutapi.AnalysisStatus {
	var a rolloutapi.AnalysisStatus
	if p.status.Analysis != nil {
		a = *p.status.Analysis
		a.Gates = slices.Clone(a.Gates)
	}
	gates := p.in.Settings.Gates
	restart := a.Wave != len(wave) || len(a.Gates) != len(gates)
	for i := range a.Gates {
		if !restart && a.Gates[i].Name != gates[i].Name {
			restart = true
		}
	}
	if !restart {
		return a
	}
	last := map[string]*rolloutapi.GateMeasurement{}
	for _, g := range a.Gates {
		last[g.Name] = g.Last
	}
	a.Wave = len(wave)
	a.Gates = make([]rolloutapi.GateStatus, len(gates))
	for i, g := range gates {
		a.Gates[i] = rolloutapi.GateStatus{Name: g.Name, Next: p.in.Now.Add(g.Interval), Last: last[g.Name]}
	}
	return a
}

// analyse holds the rollout while the wave is measured, and halts it when a gate fails.
//
// Assumptions:
//   - The controller measured every gate DueAnalysis named, from the same state, and passes the
//     answers in Measurements; a due gate without a measurement was not measured.
//   - The controller records Plan.Event when the phase, reason or step changes, or CauseChanged.
//
// Invariants:
//   - Nothing is deleted while a wave waits to be measured or is measured: only replace deletes,
//     and it runs after this check lets the rollout go on.
//   - A wave is measured once no node is on its way to the new revision (moving); until then the
//     progress deadline bounds the wait.
//   - No data is not a pass: a node of the wave without a sample, a baseline without one, or no
//     answer from Prometheus makes the measurement inconclusive. The gate's count of passed
//     measurements is kept, not advanced.
//   - A gate stays inconclusive from an inconclusive measurement until one passes or fails (or
//     the wave changes and its measurements start again): until then the rollout is Paused
//     (AnalysisInconclusive), between measurements too, and its message names what is missing
//     and is the same from one reconcile to the next while nothing else changes. The plan says
//     CauseChanged only when the gates' inconclusive causes differ from the last report's.
//   - An inconclusive gate is measured again after inconclusiveDelay: its interval, doubled per
//     inconclusive measurement in a row, up to maxInconclusiveDelay (or the interval, if longer).
//     A passed or failed measurement resets the count, and the next is one interval away.
//   - One failed measurement of any gate halts the revision (AnalysisFailed).
//   - The wave passes once every gate has passed Count measurements in a row; the next wave is
//     the nodes whose new pods become Ready from then on.
//   - Time spent measuring does not count against the progress deadline: Progress moves to Now.
func (p *planner) analyse() (Plan, bool) {
	wave := p.wave()
	if len(wave) == 0 {
		return Plan{}, false
	}
	if n := p.moving(); n > 0 {
		if plan, halted := p.deadlinePassed(); halted {
			return plan, true
		}
		return p.finish(rolloutapi.PhaseProgressing, rolloutapi.ReasonAnalysisRunning, fmt.Sprintf("step %s: %d of %d nodes updated; the analysis of %s waits for %d more nodes to become available",
			p.stepLabel(p.status.Step.Index), p.plan.Updated, p.plan.Desired, nodeCount(wave), n)+skippedNote(p.plan.Skipped)), true
	}
	a := p.analysisOf(wave)
	baseline := p.baseline(wave)
	var failed, waiting []string
	for i, g := range p.in.Settings.Gates {
		gs := &a.Gates[i]
		if p.in.Now.Before(gs.Next) {
			if gs.Inconclusive == 0 {
				waiting = append(waiting, fmt.Sprintf("%s %d/%d passed", g.Name, gs.Passed, g.Count))
			}
			continue
		}
		m := measurementOf(p.in.Measurements, g.Name)
		result, msg := judge(g, m, wave, baseline)
		gs.Last = &rolloutapi.GateMeasurement{At: p.in.Now, Result: result, Message: msg}
		run := gs.Inconclusive
		gs.Inconclusive = 0
		switch result {
		case rolloutapi.MeasurementFailed:
			failed = append(failed, fmt.Sprintf("gate %s: %s", g.Name, msg))
		case rolloutapi.MeasurementInconclusive:
			gs.Inconclusive = run + 1
		default:
			gs.Passed++
			if gs.Passed < g.Count {
				waiting = append(waiting, fmt.Sprintf("%s %d/%d passed", g.Name, gs.Passed, g.Count))
			}
		}
		gs.Next = p.in.Now.Add(inconclusiveDelay(g.Interval, gs.Inconclusive))
	}
	p.status.Analysis = &a
	p.status.Progress = p.in.Now
	if len(failed) > 0 {
		cause := fmt.Sprintf("analysis of %s failed: %s", nodeCount(wave), strings.Join(failed, "; "))
		// Never back to a revision that failed itself: a rollback that fails its gates halts.
		to := p.oldRevision()
		if p.in.Settings.RollbackOnAnalysisFailure && to != "" && to != p.status.FailedRevision && !slices.Contains(p.in.KeptRevisions, to) {
			return p.halt(rolloutapi.ReasonAnalysisFailed, fmt.Sprintf("%s; no ControllerRevision of revision %s is left to roll back to (spec.revisionHistoryLimit)", cause, to)), true
		}
		if p.in.Settings.RollbackOnAnalysisFailure && to != "" && to != p.status.FailedRevision {
			p.status.FailedRevision = p.in.TargetRevision
			plan := p.finish(rolloutapi.PhaseFailed, rolloutapi.ReasonAnalysisFailed, fmt.Sprintf("step %s: %s; rolling back: the template of revision %s is put back (%s: %s)",
				p.stepLabel(p.status.Step.Index), cause, to, rolloutapi.AnnotationOnAnalysisFailure, rolloutapi.OnAnalysisFailureRollback))
			plan.RollbackTo = to
			return plan, true
		}
		return p.halt(rolloutapi.ReasonAnalysisFailed, cause), true
	}
	done := true
	for i, g := range p.in.Settings.Gates {
		done = done && a.Gates[i].Passed >= g.Count
	}
	if done {
		p.status.Analysis = &rolloutapi.AnalysisStatus{VerifiedAt: p.in.Now, Gates: clearProgress(a.Gates)}
		return Plan{}, false
	}
	p.plan.RequeueAfter = p.nextMeasurement(a)
	step := p.stepLabel(p.status.Step.Index)
	if inconclusive := InconclusiveGates(&a); len(inconclusive) > 0 {
		plan := p.finish(rolloutapi.PhasePaused, rolloutapi.ReasonAnalysisInconclusive, fmt.Sprintf("step %s: the analysis of %s is inconclusive: %s; nothing is replaced until it has data; measuring again at %s",
			step, nodeCount(wave), strings.Join(inconclusive, "; "), p.at(p.plan.RequeueAfter)))
		plan.CauseChanged = !slices.Equal(inconclusive, InconclusiveGates(p.in.Status.Analysis))
		return plan, true
	}
	return p.finish(rolloutapi.PhaseProgressing, rolloutapi.ReasonAnalysisRunning, fmt.Sprintf("step %s: %d of %d nodes updated; analysing %s (%s): %s; next measurement at %s",
		step, p.plan.Updated, p.plan.Desired, nodeCount(wave), kubetext.List(wave), strings.Join(waiting, ", "), p.at(p.plan.RequeueAfter))), true
}

// maxInconclusiveDelay caps the wait before an inconclusive gate is measured again. Doubling
// from the gate's interval spares Prometheus a query per interval for a series that may never
// come (a gate whose query names a metric the agent does not export), while the rollout still
// notices data at most this long after it appears: five minutes is reached from the default 30s
// interval after four inconclusive measurements in a row (30s, 1m, 2m, 4m, 5m, 5m, ...). A gate
// whose interval is longer keeps its interval.
const maxInconclusiveDelay = 5 * time.Minute

// inconclusiveDelay is the wait before a gate's next measurement after `run` inconclusive
// measurements in a row: the interval, doubled per inconclusive measurement after the first,
// capped at maxInconclusiveDelay or the interval if that is longer. run 0 (the last measurement
// passed) and 1 wait one interval.
func inconclusiveDelay(interval time.Duration, run int) time.Duration {
	limit := max(interval, maxInconclusiveDelay)
	d := interval
	for i := 1; i < run && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// InconclusiveGates says, in gate order, what each inconclusive gate of a misses: "gate errors:
// no sample labelled node for 1 of 3 nodes: worker-2". A gate is inconclusive from an
// inconclusive measurement of the wave under way until one passes or fails. The rollout's Paused
// condition lists them, and an Event is recorded when they change.
func InconclusiveGates(a *rolloutapi.AnalysisStatus) []string {
	if a == nil {
		return nil
	}
	var out []string
	for _, g := range a.Gates {
		if g.Inconclusive > 0 && g.Last != nil {
			out = append(out, fmt.Sprintf("gate %s: %s", g.Name, g.Last.Message))
		}
	}
	return out
}

// nextMeasurement is how long until the first gate's next measurement is due.
func (p *planner) nextMeasurement(a rolloutapi.AnalysisStatus) time.Duration {
	var next time.Time
	for _, g := range a.Gates {
		if next.IsZero() || g.Next.Before(next) {
			next = g.Next
		}
	}
	return max(next.Sub(p.in.Now), time.Second)
}

// clearProgress is the gates after a wave passed: their last measurements, no progress.
func clearProgress(gates []rolloutapi.GateStatus) []rolloutapi.GateStatus {
	out := make([]rolloutapi.GateStatus, len(gates))
	for i, g := range gates {
		out[i] = rolloutapi.GateStatus{Name: g.Name, Last: g.Last}
	}
	return out
}

func measurementOf(ms []rolloutanalysis.Measurement, gate string) *rolloutanalysis.Measurement {
	for i := range ms {
		if ms[i].Gate == gate {
			return &ms[i]
		}
	}
	return nil
}

// judge is one gate's result on the wave: Failed naming the nodes out of bounds and their
// values (the first few, a count of the rest), Inconclusive saying what data is missing, or
// Passed. The judging itself is rolloutanalysis.Judge's; judge words it and decides what wins:
// missing data over values out of bounds, since a measurement must cover every node it judges.
func judge(g rolloutapi.Gate, m *rolloutanalysis.Measurement, wave, baseline []string) (result, message string) {
	switch {
	case m == nil:
		return rolloutapi.MeasurementInconclusive, "not measured"
	case m.Err != "":
		return rolloutapi.MeasurementInconclusive, "no answer from Prometheus: " + m.Err
	}
	j := rolloutanalysis.Judge(g, *m, wave, baseline)
	switch {
	case len(j.Missing) > 0:
		return rolloutapi.MeasurementInconclusive, fmt.Sprintf("no sample labelled %s for %d of %d nodes: %s", g.NodeLabel, len(j.Missing), len(wave), kubetext.List(j.Missing))
	case g.Baseline && j.BaselineNodes == 0:
		return rolloutapi.MeasurementInconclusive, fmt.Sprintf("no baseline: no sample labelled %s for any of %d baseline nodes (%s)", g.NodeLabel, len(baseline), kubetext.List(baseline))
	case len(j.OutOfBounds) > 0:
		out := make([]string, len(j.OutOfBounds))
		for i, nv := range j.OutOfBounds {
			out[i] = nv.Node + "=" + rolloutanalysis.FormatValue(nv.Value)
		}
		return rolloutapi.MeasurementFailed, fmt.Sprintf("%d of %d nodes out of bounds (%s): %s", len(out), len(wave), j.Bound, kubetext.List(out))
	}
	return rolloutapi.MeasurementPassed, fmt.Sprintf("%d nodes within bounds (%s)", len(wave), j.Bound)
}

func nodeCount(nodes []string) string {
	if len(nodes) == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", len(nodes))
}

// at is the moment d from now, as messages show it: a time, not a wait, so that the message
// stays the same between measurements and is not written again on every reconcile.
func (p *planner) at(d time.Duration) string {
	return p.in.Now.Add(d).UTC().Truncate(time.Second).Format(time.RFC3339)
}

// analysisFailedCause names the failed gates of an earlier reconcile's halt, as it recorded them.
func analysisFailedCause(a *rolloutapi.AnalysisStatus) string {
	failed := failedGates(a)
	if len(failed) == 0 {
		return "the analysis failed"
	}
	return "the analysis failed: " + strings.Join(failed, "; ")
}

// failedGates names the gates whose last measurement failed, with what it saw.
func failedGates(a *rolloutapi.AnalysisStatus) []string {
	var failed []string
	if a != nil {
		for _, g := range a.Gates {
			if g.Last != nil && g.Last.Result == rolloutapi.MeasurementFailed {
				failed = append(failed, fmt.Sprintf("gate %s: %s", g.Name, g.Last.Message))
			}
		}
	}
	return failed
}

// passingMeasurements are measurements of req that every gate passes on every node: the value at
// the gate's bound (bounds are inclusive), over a baseline of zeros. A forecast assumes them.
func passingMeasurements(gates []rolloutapi.Gate, req *rolloutanalysis.Request) []rolloutanalysis.Measurement {
	var out []rolloutanalysis.Measurement
	for _, q := range req.Queries {
		i := slices.IndexFunc(gates, func(g rolloutapi.Gate) bool { return g.Name == q.Gate })
		if i < 0 {
			continue
		}
		v := 0.0
		if g := gates[i]; g.Max != nil {
			v = *g.Max
		} else if g.Min != nil {
			v = *g.Min
		}
		m := rolloutanalysis.Measurement{Gate: q.Gate, Values: map[string]float64{}, Baseline: map[string]float64{}}
		for _, n := range req.Wave {
			m.Values[n] = v
		}
		for _, n := range req.BaselineNodes {
			m.Baseline[n] = 0
		}
		out = append(out, m)
	}
	return out
}
