package rolloutplan

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

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

// stuckTerminatingAfter is how long a pod may take to terminate before its node is treated like
// an unreachable one: reported and left out, instead of holding the budget forever.
const stuckTerminatingAfter = 5 * time.Minute

// nodeView classifies one reachable node against the target revision. A plan builds one per
// node: its fields hold pointers into the state rather than copies (newPod.Failure is the new
// pod's failure), and the flags come last, so that a view takes 48 bytes.
type nodeView struct {
	node        *NodeState
	newPod      *PodState // non-terminating pod at the target revision
	oldPods     []*PodState
	available   bool // some non-terminating pod is available
	newAvail    bool
	terminating bool // a pod of the node is terminating
}

// Compute decides which old-revision pods to delete now. It runs the named checks below in
// order; the first that decides the phase ends the plan. With analysis gates, a wave of new pods
// is measured (analyse, in plan_analysis.go) before the rollout completes or deletes more.
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
	return compute(in, nil)
}

// scratch is memory a caller lends the planner from one plan to the next (a Memo's, a
// forecast's): the node views, which every plan builds for each node, and how the last plan
// classified each node (classes, by index into Nodes). The next plan takes a node's class again
// while nothing it was made of changed, which spares a reconcile the pass over every node's
// pods: that pass reads memory scattered over the heap, and was a quarter of the controller's
// CPU in a rollout of 5,000 nodes. A plan, and a request of DueAnalysis, never point into a
// scratch; nil allocates it afresh.
//
// Assumptions:
//   - A lender never writes again into a Pods array it lent: a node whose pods change gets a new
//     array (a Memo's regroup makes one). The classes point into the arrays, so an array is
//     not freed, and its address not reused, while a class names it.
//
// Invariants:
//   - A class taken again is the one classifyNode makes of the node now
//     (TestRememberedClassesPlanAsFreshOnes).
type scratch struct {
	views []nodeView
	// inOrder says the lender's Nodes are in rollout order (a Memo's, kept in order by
	// reorder), so that the plan need not check: 8% of a plan at 5,000 nodes.
	inOrder bool
	// classes are the last classification of Nodes[i], of the target revision and minimum
	// readiness of classifiedFor.
	classes       []nodeClass
	classifiedFor classKey
}

// classKey is what a classification of the same pods depends on besides the clock.
type classKey struct {
	target   string
	minReady time.Duration
}

// nodeClass is a reachable node's view as classifyNode made it, the Pods array it made it of,
// and the span of time in which the same pods classify the same: from the plan's Now until the
// first pod becomes available (Ready for minReady) or its termination counts as stuck. An array
// is one node's, and a node without pods classifies as any other without pods, so the array
// says which nodes a class is of. The view's node is not set.
type nodeClass struct {
	pods        *PodState // &Pods[0]; nil for a node without pods
	from, until time.Time // until: zero for never
	view        nodeView
	stuck       bool
}

// holds says whether c is the class of node n at now.
func (c *nodeClass) holds(n *NodeState, now time.Time) bool {
	var first *PodState
	if len(n.Pods) > 0 {
		first = &n.Pods[0]
	}
	return c.pods == first && !c.from.IsZero() && !now.Before(c.from) && (c.until.IsZero() || now.Before(c.until))
}

// compute is Compute with the scratch memory s.
func compute(in RolloutState, s *scratch) Plan {
	p := newPlanner(in, s)
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
//     rollout is fixed, but FailedRevision is kept for the record. CompletedAt is cleared: a
//     new revision during a bake starts a normal rollout, and bakes again once it completes.
//   - Unreachable nodes, and nodes whose only pods are stuck terminating, are Skipped: they count
//     neither as desired nor as unavailable, so they cannot block the rollout, and a node counts
//     at most once against the budget whatever pods it holds.
//   - Progress moves to Now whenever Updated grows: the progress deadline runs from the last
//     growth, so a long step that keeps moving never times out.
func newPlanner(in RolloutState, s *scratch) *planner {
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
	if in.Settings.Bake == 0 {
		// Without a bake nothing is held after completion, and the status is what it was
		// before bakes existed; a bake added later runs from the next completed plan.
		p.status.CompletedAt = time.Time{}
	}
	p.views, p.plan.Skipped = p.classifyNodes(s)
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
		if v.newPod != nil && v.newPod.Failure != "" {
			p.plan.Failures = append(p.plan.Failures, v.node.Name+": "+v.newPod.Failure)
		}
	}
	if p.status.Progress.IsZero() || p.plan.Updated > p.status.ProgressUpdated {
		p.status.Progress = in.Now
	}
	p.status.ProgressUpdated = p.plan.Updated
	return p
}

// classifyNodes is the reachable nodes not stuck terminating, in rollout order, and the nodes
// left out with why, sorted (Nodes may come in any order, though StateOf's come in rollout order;
// the report does not). It builds them in s, when given, from the classes s remembers where they
// still hold.
func (p *planner) classifyNodes(s *scratch) ([]nodeView, []string) {
	if s == nil {
		s = &scratch{}
	}
	key := classKey{target: p.in.TargetRevision, minReady: time.Duration(p.in.MinReadySeconds) * time.Second}
	if s.classifiedFor != key {
		clear(s.classes[:cap(s.classes)])
		s.classifiedFor = key
	}
	// A node joining or leaving shifts the classes after it, which then no longer hold.
	if n := len(p.in.Nodes); n > cap(s.classes) {
		s.classes = append(s.classes[:cap(s.classes)], make([]nodeClass, n-cap(s.classes))...)
	} else {
		s.classes = s.classes[:n]
	}
	views := reuse(s.views, len(p.in.Nodes))
	var skipped []string
	for i := range p.in.Nodes {
		n := &p.in.Nodes[i]
		if !n.Reachable {
			skipped = append(skipped, n.Name+": node not ready or unreachable")
			continue
		}
		c := &s.classes[i]
		if !c.holds(n, p.in.Now) {
			*c = classifyNode(n, p.in.Now, key)
		}
		if c.stuck {
			skipped = append(skipped, n.Name+": pod stuck terminating")
			continue
		}
		v := c.view
		v.node = n
		views = append(views, v)
	}
	// StateOf and a Memo give the nodes in rollout order, and a sorted slice sorts to itself
	// (node names are unique; nodes of one name, which no cluster has, keep their order):
	// checking costs a comparison per node, sorting 5,000 nodes was half of a reconcile's time.
	// A Memo that lends its Nodes vouches for their order (s.inOrder).
	if compare := func(a, b nodeView) int { return rolloutCompare(a.node, b.node) }; !s.inOrder && !slices.IsSortedFunc(views, compare) {
		slices.SortFunc(views, compare)
	}
	sort.Strings(skipped)
	s.views = views
	return views, skipped
}

// classifyNode classifies reachable node n's pods at now against key's target revision: its
// new pod, its old ones, whether a pod is available (Ready for key.minReady, not terminating) or
// terminating, and whether the node is stuck (every pod terminating for stuckTerminatingAfter).
// The class holds until the first of its pods becomes available or stuck.
func classifyNode(n *NodeState, now time.Time, key classKey) nodeClass {
	c := nodeClass{from: now}
	if len(n.Pods) > 0 {
		c.pods = &n.Pods[0]
	}
	until := func(t time.Time) {
		if c.until.IsZero() || t.Before(c.until) {
			c.until = t
		}
	}
	// Ready since readyBy or before is Ready for minReady by now (ReadySince + minReady <= now).
	readyBy := now.Add(-key.minReady)
	v := &c.view
	stuck := len(n.Pods) > 0
	for j := range n.Pods {
		pod := &n.Pods[j]
		if pod.Terminating {
			v.terminating = true
			if pod.DeletedAt.IsZero() || now.Sub(pod.DeletedAt) < stuckTerminatingAfter {
				stuck = false
				if !pod.DeletedAt.IsZero() {
					until(pod.DeletedAt.Add(stuckTerminatingAfter))
				}
			}
			continue
		}
		stuck = false
		avail := pod.Ready && !pod.ReadySince.After(readyBy)
		if pod.Ready && !avail {
			until(pod.ReadySince.Add(key.minReady))
		}
		v.available = v.available || avail
		if pod.Revision == key.target {
			// Of two pods at the target revision (the DaemonSet controller deletes the extra
			// one), the available one, else the first by name: whatever order they come in.
			if v.newPod == nil || (avail && !v.newAvail) || (avail == v.newAvail && pod.Name < v.newPod.Name) {
				v.newPod, v.newAvail = pod, avail
			}
		} else {
			v.oldPods = append(v.oldPods, pod)
		}
	}
	if len(v.oldPods) > 1 {
		// By name, so that the plan deletes them in one order whatever order they come in.
		slices.SortFunc(v.oldPods, func(a, b *PodState) int { return strings.Compare(a.Name, b.Name) })
	}
	c.stuck = stuck
	return c
}

// reuse is buf emptied, with room for n elements: a new array when buf's is too small.
func reuse[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, 0, n)
	}
	return buf[:0]
}

// complete ends a rollout whose every reachable node runs an available pod of the target
// revision (and, with gates, whose last wave passed them): every step is done, and a failure
// recorded for the revision is cleared. With a bake (Settings.Bake) the rollout is Complete
// only once the bake has passed (see bake).
func (p *planner) complete() Plan {
	p.status.Step.Index = len(p.in.Settings.Steps)
	p.status.FailedRevision = ""
	msg := fmt.Sprintf("%d of %d nodes run revision %s", p.plan.Updated, p.plan.Desired, p.in.TargetRevision)
	if p.in.Settings.Bake > 0 {
		if left, baking := p.bake(); baking {
			p.plan.RequeueAfter = left
			return p.finish(rolloutapi.PhaseProgressing, rolloutapi.ReasonBaking, msg+bakingNote(left, p.in.Settings.Bake, p.status.CompletedAt)+skippedNote(p.plan.Skipped))
		}
		msg += fmt.Sprintf("; baked %s since %s", p.in.Settings.Bake, formatUTC(p.status.CompletedAt))
	}
	return p.finish(rolloutapi.PhaseComplete, rolloutapi.ReasonComplete, msg+skippedNote(p.plan.Skipped))
}

// bake says how long a completed rollout is still held by its bake, and whether it is; it
// records when the rollout completed (Status.CompletedAt), from which the bake runs.
//
// Assumptions:
//   - Settings.Bake > 0 (complete calls bake only then).
//   - Status.CompletedAt is zero (the revision never completed; newPlanner clears it for a new
//     revision), or was written by an earlier plan of this revision, to the second. A malformed
//     annotation reaches the planner as zero (DecodeStatus leaves it out and names it).
//   - Now and CompletedAt may come from different clocks: another replica took the lead, or
//     the node's clock was stepped.
//
// Invariants:
//   - CompletedAt is set once per revision, the first time every node runs it and its gates
//     have passed, and kept while the revision stays: a node that joins later, or a pod that
//     restarts, is rolled as usual but does not bake the revision again, so Argo CD's health
//     does not go back to Progressing for a bake per node added. A zero CompletedAt (never
//     completed, or malformed) is read as "completed now": the full bake runs from now.
//   - A CompletedAt after Now (clock skew, a hand edit) is moved back to Now: the rollout stays
//     baking, for at most Bake from this reconcile, and never waits on a time in the future.
//   - With end = CompletedAt + Bake: baking while Now < end, with left = end - Now in
//     (0, Bake], and the plan asks to come back after left (RequeueAfter); Complete once
//     Now >= end. No arithmetic here can overflow: Bake <= MaxBake (24h), and CompletedAt is
//     at most Now.
func (p *planner) bake() (left time.Duration, baking bool) {
	now := p.in.Now
	if p.status.CompletedAt.IsZero() || p.status.CompletedAt.After(now) {
		p.status.CompletedAt = now
	}
	left = p.status.CompletedAt.Add(p.in.Settings.Bake).Sub(now)
	return left, left > 0
}

// bakingNote is the message's account of a bake under way: the time left, rounded up to the
// second so that it never says "0s", and the bake it is part of.
func bakingNote(left, bake time.Duration, since time.Time) string {
	shown := (left + time.Second - 1).Truncate(time.Second)
	return fmt.Sprintf("; baking %s more (%s %s since %s)", shown, rolloutapi.AnnotationBake, bake, formatUTC(since))
}

// formatUTC is t as the status annotations write times: RFC 3339 in UTC, to the second.
func formatUTC(t time.Time) string {
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
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
//     (a node added after every step was done) it stays on the last step, which targets 100%,
//     and the rollout of that node starts now (Progress).
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
		// Every step was done: the rollout had completed, and a node has joined or lost its new
		// pod since. Rolling it starts now, so the progress deadline runs from now, not from the
		// last growth before the completion (which would fail the rollout at once).
		p.status.Step.Index = len(steps) - 1
		p.status.Progress = p.in.Now
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
	domain := currentDomain(p.views, s.TopologyKey != "")
	// Old pods that are unavailable first, then the candidates (available old pods in the
	// current domain) in rollout order: two passes over p.views rather than a slice of the
	// candidates, which early in a rollout are nearly every node (a forecast plans about twice
	// per node, a reconcile on every pod event).
	for i := range p.views {
		if v := &p.views[i]; len(v.oldPods) > 0 && v.newPod == nil && !v.available {
			p.deleteOld(v)
		}
	}
	target := s.Steps[p.status.Step.Index].Target(p.plan.Desired)
	const nextShown = 5
	var next []string
	for i := range p.views {
		v := &p.views[i]
		if len(v.oldPods) == 0 || v.newPod != nil || !v.available || (s.TopologyKey != "" && v.node.Domain != domain) {
			continue
		}
		if unavailable >= p.plan.Budget || p.touched >= target {
			// Neither count grows past here, so every candidate left waits: once five are
			// named, the rest change nothing.
			if len(next) == nextShown {
				break
			}
			next = append(next, v.node.Name)
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

// nodesOf names the nodes of refs, each once, in the order of refs.
//
// Assumptions:
//   - The refs of one node are next to each other: deleteOld plans every old pod of a node at
//     once, and replace calls it at most once per node (an unavailable node in its first pass,
//     an available one in its second). So a node is named when it differs from the ref before,
//     without a set of the names seen: a wave of 500 nodes built a 500-entry map per reconcile.
func nodesOf(refs []PodRef) string {
	var b strings.Builder
	for i, r := range refs {
		if i > 0 && r.Node == refs[i-1].Node {
			continue
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.Node)
	}
	return b.String()
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
