package rollout

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

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

// RolloutState is the controller's memory, persisted in status annotations on the DaemonSet.
type RolloutState struct {
	Revision       string    // target revision the state belongs to
	StepIndex      int       // 0-based index of the current step; len(steps) when done
	StepStarted    time.Time // when the current step began
	PauseToken     string    // rolloutapi.AnnotationResume when the current indefinite pause began
	FailedRevision string    // revision whose rollout failed
	// Progress is when the number of updated nodes last grew (or the step began); the progress
	// deadline runs from it, so a long step that keeps moving never times out.
	Progress        time.Time
	ProgressUpdated int
}

// Input is everything the planner needs; it never talks to the API server.
type Input struct {
	// Name and Namespace of the DaemonSet, for the commands a message suggests.
	Name, Namespace string
	TargetRevision  string
	Nodes           []NodeState // every node the DaemonSet targets, reachable or not, in any order
	Settings        Settings
	MinReadySeconds int32
	State           RolloutState
	// PreviousFailure is the reason of the Failed condition while it is True: why an earlier
	// reconcile halted the rollout, which later ones keep naming when the cause no longer shows
	// (a crash-looping pod between two crashes).
	PreviousFailure string
	Now             time.Time
}

// PodRef names a pod to delete; the UID is used as a precondition so a pod recreated under the
// same name is never deleted by mistake.
type PodRef struct {
	Name, UID, Node string
}

// Plan is the planner's decision for one reconcile.
type Plan struct {
	Delete       []PodRef
	Phase        rolloutapi.Phase
	Reason       string
	Message      string
	State        RolloutState
	Updated      int // nodes whose pod runs the target revision and is available
	Desired      int // reachable nodes the rollout covers
	Unavailable  int // reachable nodes without an available pod, before this plan's deletions
	Budget       int
	NextNodes    []string
	NextReason   string
	Failures     []string                // "node: reason" for new-revision pods that fail
	Skipped      []string                // nodes left out: unreachable, or pods stuck terminating
	RequeueAfter time.Duration           // when the plan would change without any event (pauses, deadlines)
	Step         rolloutapi.StepPosition // the current step, "3/5: 25%"
	// Event is what the rollout's Event says when the phase, reason or step changes: the same
	// reason and message as the condition. Decide records it on a transition.
	Event Event
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

// BuildPlan decides which old-revision pods to delete now.
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
//   - Nothing is deleted while the rollout is paused or failed.
//   - Pods on unreachable nodes are never deleted, and such nodes (and nodes whose pods are stuck
//     terminating) count neither as desired nor as unavailable: they cannot block the rollout,
//     and a node counts at most once against the budget whatever pods it holds.
//   - Let U be the reachable nodes without an available pod. Old pods that are already
//     unavailable are replaced first without budget (deleting them makes nothing less
//     available), as upstream's rollingUpdate does. An available old pod is deleted only while
//     U < budget, and each such deletion adds one to U: after the plan U <= max(U before, budget).
//   - At most Target(step) nodes are brought to the new revision by the current step: deletions
//     of available pods stop at the step's target.
func BuildPlan(in Input) Plan {
	s := in.Settings
	state := in.State
	if state.Revision != in.TargetRevision {
		// A new template restarts the plan at the first step; a failure of an older revision
		// no longer applies (rolling forward is how a failed rollout is fixed).
		state = RolloutState{Revision: in.TargetRevision, StepStarted: in.Now, PauseToken: s.ResumeToken, FailedRevision: state.FailedRevision, Progress: in.Now}
	}

	minReady := time.Duration(in.MinReadySeconds) * time.Second
	availableAt := func(p *PodState) bool {
		return p.Ready && !p.Terminating && !in.Now.Before(p.ReadySince.Add(minReady))
	}

	var views []nodeView
	var skipped []string
	for i := range in.Nodes {
		n := &in.Nodes[i]
		if !n.Reachable {
			skipped = append(skipped, n.Name+": node not ready or unreachable")
			continue
		}
		v := nodeView{node: n}
		stuck := len(n.Pods) > 0
		for j := range n.Pods {
			p := &n.Pods[j]
			if p.Terminating {
				v.terminating = true
				if p.DeletedAt.IsZero() || in.Now.Sub(p.DeletedAt) < stuckTerminatingAfter {
					stuck = false
				}
				continue
			}
			stuck = false
			if availableAt(p) {
				v.available = true
			}
			if p.Revision == in.TargetRevision {
				v.newPod = p
				v.newAvail = availableAt(p)
				v.newFailure = p.Failure
			} else {
				v.oldPods = append(v.oldPods, p)
			}
		}
		if stuck {
			skipped = append(skipped, n.Name+": pod stuck terminating")
			continue
		}
		views = append(views, v)
	}
	sort.Slice(views, func(i, j int) bool { return rolloutOrder(views[i].node, views[j].node) })

	sort.Strings(skipped) // Nodes may come in any order; the report does not
	plan := Plan{Desired: len(views), Skipped: skipped}
	plan.Budget = ResolveMaxUnavailable(s.MaxUnavailable, plan.Desired)
	touched := 0 // nodes already moving to, or at, the new revision
	for _, v := range views {
		if v.newAvail {
			plan.Updated++
		}
		if !v.available {
			plan.Unavailable++
		}
		if v.newPod != nil || (len(v.oldPods) == 0) {
			touched++
		}
		if v.newPod != nil && v.newFailure != "" {
			plan.Failures = append(plan.Failures, v.node.Name+": "+v.newFailure)
		}
	}

	if state.Progress.IsZero() || plan.Updated > state.ProgressUpdated {
		state.Progress = in.Now
	}
	state.ProgressUpdated = plan.Updated

	steps := s.Steps
	position := func(i int) rolloutapi.StepPosition {
		if i >= len(steps) {
			return rolloutapi.StepPosition{Index: len(steps), Count: len(steps)}
		}
		return rolloutapi.StepPosition{Index: i, Count: len(steps), Spec: steps[i].Text}
	}
	// stepLabel names a step in messages: "3/5 (25%)", "5/5 (done)".
	stepLabel := func(i int) string {
		p := position(i)
		return p.Position() + " (" + p.Label() + ")"
	}
	finish := func(phase rolloutapi.Phase, reason, msg string) Plan {
		plan.Phase, plan.Reason, plan.Message, plan.State = phase, reason, msg, state
		plan.Step = position(state.StepIndex)
		plan.Event = rolloutEvent(phase, reason, msg)
		return plan
	}
	// halt fails the rollout of the target revision: nothing more is deleted until a new
	// template rolls forward.
	halt := func(reason, cause string) Plan {
		state.FailedRevision = in.TargetRevision
		idx := min(state.StepIndex, len(steps)-1)
		return finish(rolloutapi.PhaseFailed, reason, haltMessage(stepLabel(idx), cause, views, plan.Desired, in))
	}

	// Done: every reachable node runs an available pod of the target revision.
	if plan.Updated == plan.Desired {
		state.StepIndex = len(steps)
		state.FailedRevision = ""
		return finish(rolloutapi.PhaseComplete, "RolloutComplete", fmt.Sprintf("%d of %d nodes run revision %s", plan.Updated, plan.Desired, in.TargetRevision)+skippedNote(skipped))
	}
	if len(plan.Failures) > 0 {
		return halt(rolloutapi.ReasonPodFailure, "new pods fail")
	}
	if state.FailedRevision == in.TargetRevision {
		// Halted by an earlier reconcile: keep its reason, and say how the nodes are now. The
		// reason comes from the Failed condition, which is written after the status annotations:
		// a reconcile that sees the annotations first finds the deadline passed in them.
		switch {
		case in.PreviousFailure == rolloutapi.ReasonPodFailure:
			return halt(rolloutapi.ReasonPodFailure, "new pods failed")
		case in.PreviousFailure == rolloutapi.ReasonProgressDeadline || !in.Now.Before(state.Progress.Add(s.ProgressDeadline)):
			return halt(rolloutapi.ReasonProgressDeadline, deadlineCause(s.ProgressDeadline))
		}
		return halt(rolloutapi.ReasonRolloutFailed, "the rollout of revision "+in.TargetRevision+" failed")
	}

	// Advance through completed steps and elapsed or resumed pauses.
	for state.StepIndex < len(steps) {
		st := steps[state.StepIndex]
		done := false
		switch st.Kind {
		case rolloutapi.StepTimedPause:
			done = !in.Now.Before(state.StepStarted.Add(st.Duration))
		case rolloutapi.StepPause:
			done = s.ResumeToken != state.PauseToken
		default:
			done = plan.Updated >= st.Target(plan.Desired)
		}
		if !done {
			break
		}
		state.StepIndex++
		state.StepStarted = in.Now
		state.Progress = in.Now
		state.PauseToken = s.ResumeToken
	}
	if state.StepIndex >= len(steps) {
		// Every step is done but some node lags (e.g. a node added since): finish with the last
		// step, which always targets 100%.
		state.StepIndex = len(steps) - 1
	}
	st := steps[state.StepIndex]

	if s.Paused {
		state.Progress = in.Now // time spent paused does not count against the deadline
		return finish(rolloutapi.PhasePaused, "PausedByAnnotation", fmt.Sprintf("step %s: paused by %s=true; %d of %d nodes updated; resume with: daemonguard rollout resume %s", stepLabel(state.StepIndex), rolloutapi.AnnotationPaused, plan.Updated, plan.Desired, dsArg(in)))
	}
	switch st.Kind {
	case rolloutapi.StepTimedPause:
		state.Progress = in.Now
		remaining := state.StepStarted.Add(st.Duration).Sub(in.Now)
		plan.RequeueAfter = remaining
		// Rounded up: a pause that has not ended never says "0s more".
		shown := (remaining + time.Second - 1).Truncate(time.Second)
		return finish(rolloutapi.PhasePaused, "TimedPause", fmt.Sprintf("step %s: waiting %s more; %d of %d nodes updated", stepLabel(state.StepIndex), shown, plan.Updated, plan.Desired))
	case rolloutapi.StepPause:
		state.Progress = in.Now
		return finish(rolloutapi.PhasePaused, "PausedAtStep", fmt.Sprintf("step %s: paused until %s changes; %d of %d nodes updated; resume with: daemonguard rollout resume %s", stepLabel(state.StepIndex), rolloutapi.AnnotationResume, plan.Updated, plan.Desired, dsArg(in)))
	}

	if deadline := state.Progress.Add(s.ProgressDeadline); !in.Now.Before(deadline) {
		return halt(rolloutapi.ReasonProgressDeadline, deadlineCause(s.ProgressDeadline))
	} else {
		plan.RequeueAfter = deadline.Sub(in.Now)
	}

	// Replace old pods that are unavailable anyway: no budget needed.
	unavailable := plan.Unavailable
	var candidates []nodeView
	domain := currentDomain(views, s.TopologyKey != "")
	for _, v := range views {
		if len(v.oldPods) == 0 || v.newPod != nil {
			continue
		}
		if !v.available {
			for _, p := range v.oldPods {
				plan.Delete = append(plan.Delete, PodRef{Name: p.Name, UID: p.UID, Node: v.node.Name})
			}
			touched++
			continue
		}
		if s.TopologyKey == "" || v.node.Domain == domain {
			candidates = append(candidates, v)
		}
	}
	// Then available old pods, in rollout order, within both the budget and the step's target.
	target := st.Target(plan.Desired)
	for _, v := range candidates {
		if unavailable >= plan.Budget || touched >= target {
			plan.NextNodes = append(plan.NextNodes, v.node.Name)
			continue
		}
		for _, p := range v.oldPods {
			plan.Delete = append(plan.Delete, PodRef{Name: p.Name, UID: p.UID, Node: v.node.Name})
		}
		unavailable++
		touched++
	}
	if len(plan.NextNodes) > 5 {
		plan.NextNodes = plan.NextNodes[:5]
	}
	plan.NextReason = orderReason(s.TopologyKey, domain)
	msg := fmt.Sprintf("step %s: %d of %d nodes updated, %d unavailable of budget %d", stepLabel(state.StepIndex), plan.Updated, plan.Desired, plan.Unavailable, plan.Budget)
	if len(plan.Delete) > 0 {
		msg += fmt.Sprintf("; replacing pods on %s", nodesOf(plan.Delete))
	}
	if len(plan.NextNodes) > 0 {
		msg += "; next: " + strings.Join(plan.NextNodes, ", ")
	}
	return finish(rolloutapi.PhaseProgressing, "RolloutProgressing", msg+skippedNote(skipped))
}

// rolloutOrder is deterministic and explainable: workers before control-plane nodes, then by
// topology domain, then by name.
func rolloutOrder(a, b *NodeState) bool {
	if a.ControlPlane != b.ControlPlane {
		return !a.ControlPlane
	}
	if a.Domain != b.Domain {
		return a.Domain < b.Domain
	}
	return a.Name < b.Name
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

// listedNodes is how many nodes a message names before it counts the rest.
const listedNodes = 3

// listNodes names the first listedNodes items and counts the rest: "a, b, c and 4 more".
func listNodes(items []string) string {
	if len(items) <= listedNodes {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:listedNodes], ", "), len(items)-listedNodes)
}

// deadlineCause says that the progress deadline passed, and how long it is.
func deadlineCause(d time.Duration) string {
	return fmt.Sprintf("new pods not Ready within the progress deadline of %s", d)
}

// dsArg is the DaemonSet as the daemonguard CLI takes it.
func dsArg(in Input) string {
	return fmt.Sprintf("ds/%s -n %s", in.Name, in.Namespace)
}

// haltMessage is the message of every halted rollout: the step, the cause, the nodes whose new
// pods are not available (the first few, a count, and since when), and what to do about it.
func haltMessage(step, cause string, views []nodeView, desired int, in Input) string {
	var issues []string
	for _, v := range views {
		if issue := nodeIssue(v); issue != "" {
			issues = append(issues, issue)
		}
	}
	nodes := "no new pod is unavailable now"
	if len(issues) > 0 {
		nodes = fmt.Sprintf("new pods not available on %d of %d nodes: %s", len(issues), desired, listNodes(issues))
	}
	return fmt.Sprintf("step %s: %s; %s; no further pods are replaced; fix the template and apply it to roll forward, or roll back with: daemonguard rollout undo %s",
		step, cause, nodes, dsArg(in))
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

// InvalidSettingsMessage is the Failed message for settings annotations that do not parse: what
// is wrong, and what to do. Nothing is replaced until they are fixed; a new template does not
// help.
func InvalidSettingsMessage(err error) string {
	return err.Error() + "; no pods are replaced until the annotation is fixed: correct it in the manifest and apply it"
}

// rolloutEvent is the Event a rollout's phase change records: the condition's reason and
// message, a warning for a failure, which also counts in daemonguard_rollout_failures_total.
func rolloutEvent(phase rolloutapi.Phase, reason, msg string) Event {
	switch phase {
	case rolloutapi.PhaseFailed:
		return Event{Type: corev1.EventTypeWarning, Reason: "RolloutFailed", Note: reason + ": " + msg, FailureReason: reason}
	case rolloutapi.PhaseComplete:
		return Event{Type: corev1.EventTypeNormal, Reason: "RolloutComplete", Note: msg}
	case rolloutapi.PhasePaused:
		return Event{Type: corev1.EventTypeNormal, Reason: "RolloutPaused", Note: msg}
	}
	return Event{Type: corev1.EventTypeNormal, Reason: "RolloutProgressing", Note: msg}
}

func skippedNote(skipped []string) string {
	if len(skipped) == 0 {
		return ""
	}
	return fmt.Sprintf("; %d nodes left out (%s)", len(skipped), strings.Join(skipped, "; "))
}
