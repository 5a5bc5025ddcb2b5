package rollout

import (
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Facts is what one reconcile of a managed DaemonSet read, in one step: plain data, no client.
// Observed is what the planner classifies; Now is the reconcile's one reading of the clock.
type Facts struct {
	rolloutplan.Observed
	// SettingsErr is set when the settings annotations do not parse; nothing more is read.
	SettingsErr error
	// LastReport is when this process last reported the DaemonSet's progress; zero if never.
	LastReport time.Time
	// StatusErr names the status annotations that did not decode (DecodeStatus): the planner
	// went on without them (a malformed completion time reads as "completed now"), and the next
	// report writes them anew.
	StatusErr error
	// Memo is the DaemonSet's memo of classified pods and nodes from the last reconcile: what
	// StateOf makes of Observed is the same with it or without (nil), at a cost that follows
	// what changed since.
	Memo *rolloutplan.Memo
}

// Decision is every write of one reconcile, decided from Facts alone; apply performs it.
type Decision struct {
	Plan        *rolloutplan.Plan           // the rollout plan; nil when there was nothing to plan
	Annotations map[string]*string          // status annotation changes (nil removes); empty: none
	Conditions  []appsv1.DaemonSetCondition // the DaemonSet's new conditions; nil: unchanged
	Event       *rolloutplan.Event          // the Event to record; nil: none
	// Rewritten is the warning Event that says malformed status annotations were replaced by
	// this report (Facts.StatusErr); nil: none.
	Rewritten *rolloutplan.Event
	// Reported says the progress report is written now: apply records Facts.Now as the last one.
	Reported bool
	// Rollback is the template to put back after a failed analysis; nil: none.
	Rollback *Rollback
	// Measured are the analysis gates' results of the measurements this reconcile took, in gate
	// order, for the metrics.
	Measured     []GateResult
	RequeueAfter time.Duration
}

// Rollback names the revision whose template apply puts back (Plan.RollbackTo).
type Rollback struct {
	// Hash is the revision's controller-revision-hash; Name and Number its ControllerRevision's.
	Hash   string
	Name   string
	Number int64
	// Failed is the revision whose analysis failed.
	Failed string
}

// GateResult is one gate's result on this reconcile's measurement.
type GateResult struct {
	Gate, Result string
}

// reportInterval bounds how often progress counts are written while nothing else changes.
const reportInterval = time.Second

// revisionPending is how soon to look again while the current template's revision is unknown:
// the DaemonSet controller creates it within moments of observing a new generation.
const revisionPending = time.Second

// decide turns the facts of one reconcile into its writes: it classifies the nodes and pods and
// plans on them through the memo (Memo.Compute: rolloutplan.StateOf, then rolloutplan.Compute)
// and decides what of the plan to report now.
//
// Invariants:
//   - Settings that do not parse set the Failed condition (InvalidSettings, with a message that
//     says what to do) and nothing else: no pod is deleted, no Event is recorded, and the status
//     annotations, the controller's memory, are kept.
//   - Pods are deleted as the plan says, whether or not the report is written now.
//   - A transition (another phase, reason, step or target revision than the DaemonSet shows) is
//     reported at once, with the plan's Event, whose reason and message are the condition's.
//     So is a new cause under the same phase and reason (Plan.CauseChanged: an inconclusive
//     analysis that now misses other data); the same cause measured again records no Event.
//     Without one, only counts moved: on a 1,000-node rollout every pod event would otherwise
//     cost two writes to the API server the rollout itself is waiting on, so the report is
//     written at most once per reportInterval, and the reconcile comes back after
//     reportInterval to flush it.
//   - A reconcile that changes the analysis (a wave whose analysis starts, a measurement taken)
//     writes the report at once: when the wave's analysis started, the measurements' results and
//     when the next ones are due are the controller's memory, and a deferred report would start
//     the analysis again a moment later, or measure again without counting what it saw. So does
//     one that changes the completion time a bake runs from (StatusCompletedAt): deferred, the
//     next reconcile would take its own now for it, and the bake would end later.
//   - A plan that rolls back names the ControllerRevision to put back, found among Revisions by
//     its hash (the planner picks only a revision that is kept); apply puts it back before it
//     writes the report (a failed write is retried by measuring again; once the report says the
//     revision failed, the plan no longer rolls back).
//   - Annotations and conditions are written only where they differ from the DaemonSet's.
//   - Status annotations that did not decode (Facts.StatusErr) are never fatal: the plan goes on
//     without them, and the report that writes them anew records a warning Event naming them.
func decide(f Facts) Decision {
	annotations, conditions := f.DaemonSet.Annotations, f.DaemonSet.Status.Conditions
	if f.SettingsErr != nil {
		// Admitted while the webhook was bypassed: report, do nothing until it is fixed.
		return Decision{Conditions: rolloutConditions(conditions, rolloutapi.PhaseFailed, rolloutapi.ReasonInvalidSettings, InvalidSettingsMessage(f.SettingsErr), f.Now)}
	}
	if f.TargetRevision == "" {
		return Decision{RequeueAfter: revisionPending}
	}
	plan := f.Memo.Compute(f.Observed)
	d := Decision{Plan: &plan, Measured: measuredGates(plan.Status.Analysis, f.Now)}
	// The planner rolls back only to a revision among f.Revisions, so the lookup finds it.
	if cr := rolloutapi.RevisionWithHash(f.DaemonSet, f.Revisions, plan.RollbackTo); plan.RollbackTo != "" && cr != nil {
		d.Rollback = &Rollback{Hash: plan.RollbackTo, Failed: f.TargetRevision, Name: cr.Name, Number: cr.Revision}
	}

	previous := rolloutplan.ActiveCondition(conditions)
	transition := previous == nil || string(previous.Type) != string(plan.Phase) || previous.Reason != plan.Reason ||
		annotations[rolloutapi.StatusStep] != plan.Status.Step.String() || annotations[rolloutapi.StatusRevision] != plan.Status.Revision
	changes := rolloutapi.StatusChanges(annotations, plan.Status)
	_, analysisChanged := changes[rolloutapi.StatusAnalysis]
	_, completionChanged := changes[rolloutapi.StatusCompletedAt]
	if !transition && !analysisChanged && !completionChanged && f.Now.Sub(f.LastReport) < reportInterval {
		d.RequeueAfter = reportInterval
		return d
	}
	d.Reported = true
	d.Annotations = changes
	if f.StatusErr != nil && len(changes) > 0 {
		d.Rewritten = &rolloutplan.Event{Type: corev1.EventTypeWarning, Reason: reasonStatusRewritten,
			Note: "ignored malformed status annotations and wrote them anew from this plan: " + strings.ReplaceAll(f.StatusErr.Error(), "\n", "; ")}
	}
	d.Conditions = rolloutConditions(conditions, plan.Phase, plan.Reason, plan.Message, f.Now)
	if transition || plan.CauseChanged {
		d.Event = &plan.Event
	}
	d.RequeueAfter = plan.RequeueAfter
	if minReady := time.Duration(f.DaemonSet.Spec.MinReadySeconds) * time.Second; plan.Phase == rolloutapi.PhaseProgressing && minReady > 0 &&
		(d.RequeueAfter == 0 || minReady < d.RequeueAfter) {
		// A new pod becomes available MinReadySeconds after it is Ready, with no event to say so.
		d.RequeueAfter = minReady
	}
	return d
}

// measuredGates are the results of the gates the plan measured now: those whose last
// measurement was taken at now.
func measuredGates(a *rolloutapi.AnalysisStatus, now time.Time) []GateResult {
	if a == nil {
		return nil
	}
	var out []GateResult
	for _, g := range a.Gates {
		if g.Last != nil && g.Last.At.Equal(now) {
			out = append(out, GateResult{Gate: g.Name, Result: g.Last.Result})
		}
	}
	return out
}

// InvalidSettingsMessage is the Failed message for settings annotations that do not parse: what
// is wrong, and what to do. Nothing is replaced until they are fixed; a new template does not
// help.
func InvalidSettingsMessage(err error) string {
	return err.Error() + "; no pods are replaced until the annotation is fixed: correct it in the manifest and apply it"
}

// rolloutConditions makes the phase's condition the one True rollout condition of conds, keeping
// conditions of other owners; nil when conds already say so. conds is not modified.
func rolloutConditions(conds []appsv1.DaemonSetCondition, phase rolloutapi.Phase, reason, message string, now time.Time) []appsv1.DaemonSetCondition {
	out := append([]appsv1.DaemonSetCondition(nil), conds...)
	changed := false
	for _, t := range rolloutapi.RolloutConditions {
		status, r1, m1 := corev1.ConditionFalse, "", ""
		if string(t) == string(phase) {
			status, r1, m1 = corev1.ConditionTrue, reason, message
		}
		idx := -1
		for i := range out {
			if out[i].Type == t {
				idx = i
			}
		}
		if idx < 0 {
			out = append(out, appsv1.DaemonSetCondition{Type: t, Status: status, Reason: r1, Message: m1, LastTransitionTime: metav1.NewTime(now)})
			changed = true
			continue
		}
		c := &out[idx]
		if c.Status != status {
			c.Status, c.LastTransitionTime = status, metav1.NewTime(now)
			changed = true
		}
		if c.Reason != r1 || c.Message != m1 {
			c.Reason, c.Message = r1, m1
			changed = true
		}
	}
	if !changed {
		return nil
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}
