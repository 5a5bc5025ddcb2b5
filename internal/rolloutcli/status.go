package rolloutcli

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// StatusReport is what `rollout status` reports about one DaemonSet at one moment: the view a
// person reads, built from the DaemonSet and, for a managed one, from the status annotations
// that rolloutapi.Status encodes.
type StatusReport struct {
	Name    string
	Managed bool // daemonguard's rollout controller rolls it out
	Phase   rolloutapi.Phase
	Done    bool   // nothing left to wait for: complete, or an unmanaged OnDelete DaemonSet
	Failed  bool   // the rollout failed (managed only)
	Paused  bool   // the rollout is paused (managed only)
	Message string // one line for a person, kubectl-style for unmanaged DaemonSets
	// Warning is set when the configuration looks wrong (e.g. managed annotation on RollingUpdate).
	Warning string

	// Updated, Available and Desired count nodes (a DaemonSet runs one pod per node). They are
	// the DaemonSet controller's (status.updatedNumberScheduled etc.: nodes running a pod of the
	// current template, nodes with an available pod, nodes that should run one) unless
	// ControllerCounts: then Updated and Desired are daemonguard's rollout controller's
	// (status.daemonguard.io/updated: reachable nodes whose pod runs the target revision and is
	// available, of the reachable nodes), and Available is not known.
	Updated, Available, Desired int32
	ControllerCounts            bool
	// Reported is, with ControllerCounts, the state the status annotations report: "failed"
	// (status.daemonguard.io/failed-revision names the revision), "paused" (at a pause step, or
	// daemonguard.io/paused), "baking until <RFC 3339 time>" (the Progressing condition's reason
	// is Baking: status.daemonguard.io/completed-at plus daemonguard.io/bake) or "".
	Reported string
	// Step is the managed rollout's current step as "<index>/<count>" and StepSpec the step
	// itself ("25%", "pause", "pause:5m"), from status.daemonguard.io/step.
	Step, StepSpec string
	// Next lists the nodes replaced next ("worker-3, worker-4") and NextReason why in that order,
	// from status.daemonguard.io/next-nodes.
	Next, NextReason string
	// Measurements are the analysis gates' last measurements, one line each, from
	// status.daemonguard.io/analysis: "gate errors: Passed at 2026-11-26T21:00:00Z: 3 nodes
	// within bounds (max 0.1)".
	Measurements []string
}

// Evaluate reports the rollout state of ds. currentRevision is the controller-revision-hash of
// the DaemonSet's current template (see FetchCurrentRevisionHash) or "" when unknown; for a managed
// DaemonSet it tells a report about an older revision (a Failed condition from before the fix was
// applied) from one about the current template.
func Evaluate(ds *appsv1.DaemonSet, currentRevision string) StatusReport {
	s := StatusReport{
		Name:      ds.Name,
		Updated:   ds.Status.UpdatedNumberScheduled,
		Available: ds.Status.NumberAvailable,
		Desired:   ds.Status.DesiredNumberScheduled,
	}
	managedAnnotation := rolloutapi.IsOptedIn(ds)
	switch {
	case rolloutapi.IsManaged(ds):
		s.Managed = true
		evaluateManaged(ds, currentRevision, &s)
	case ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType:
		s.Phase, s.Done = rolloutapi.PhaseNotRolling, true
		s.Message = fmt.Sprintf("daemon set %q uses updateStrategy OnDelete and is not managed by daemonguard: nothing rolls its pods out, "+
			"each pod is replaced only when someone deletes it (%d of %d pods run the current template). "+
			"Add the annotation %s: %q to let daemonguard's rollout controller roll it out progressively",
			ds.Name, s.Updated, s.Desired, rolloutapi.AnnotationRollout, rolloutapi.RolloutManaged)
	default:
		if managedAnnotation {
			s.Warning = fmt.Sprintf("the annotation %s: %q has no effect with updateStrategy %s: the built-in DaemonSet controller rolls the pods out; set updateStrategy.type OnDelete for daemonguard to manage the rollout",
				rolloutapi.AnnotationRollout, rolloutapi.RolloutManaged, strategyName(ds))
		}
		evaluateRollingUpdate(ds, &s)
	}
	return s
}

func strategyName(ds *appsv1.DaemonSet) string {
	if ds.Spec.UpdateStrategy.Type == "" {
		return string(appsv1.RollingUpdateDaemonSetStrategyType)
	}
	return string(ds.Spec.UpdateStrategy.Type)
}

// evaluateRollingUpdate mirrors `kubectl rollout status ds` (DaemonSetStatusViewer).
func evaluateRollingUpdate(ds *appsv1.DaemonSet, s *StatusReport) {
	st := ds.Status
	switch {
	case ds.Generation > st.ObservedGeneration:
		s.Phase = rolloutapi.PhaseWaiting
		s.Message = "Waiting for daemon set spec update to be observed..."
	case st.UpdatedNumberScheduled < st.DesiredNumberScheduled:
		s.Phase = rolloutapi.PhaseProgressing
		s.Message = fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d out of %d new pods have been updated...", ds.Name, st.UpdatedNumberScheduled, st.DesiredNumberScheduled)
	case st.NumberAvailable < st.DesiredNumberScheduled:
		s.Phase = rolloutapi.PhaseProgressing
		s.Message = fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d of %d updated pods are available...", ds.Name, st.NumberAvailable, st.DesiredNumberScheduled)
	default:
		s.Phase, s.Done = rolloutapi.PhaseComplete, true
		s.Message = fmt.Sprintf("daemon set %q successfully rolled out", ds.Name)
	}
}

func evaluateManaged(ds *appsv1.DaemonSet, currentRevision string, s *StatusReport) {
	a := ds.Annotations
	st := ds.Status
	// The rollout controller reports in two writes, status annotations first and conditions
	// second, so a snapshot can hold the new annotations and the previous condition. Each line is
	// therefore built from one source: the message from the condition alone (whose message names
	// the step and the counts), the progress line from the status annotations alone.
	rep, err := rolloutapi.DecodeStatus(a)
	if err != nil {
		s.Warning = "malformed rollout status annotations left out: " + err.Error()
	}
	reported := func() {
		if c := rep.Counts; c != nil {
			s.Updated, s.Available, s.Desired, s.ControllerCounts = int32(c.Updated), 0, int32(c.Desired), true
		}
		s.Step, s.StepSpec = rep.Step.Position(), rep.Step.Label()
		s.Next, s.NextReason = strings.Join(rep.NextNodes, ", "), rep.NextReason
		s.Measurements = measurementLines(rep.Analysis)
		switch {
		case rep.Step.Done():
		case rep.FailedRevision != "" && rep.FailedRevision == rep.Revision:
			s.Reported = "failed"
		case a[rolloutapi.AnnotationPaused] == "true" || rep.Step.Spec == "pause" || strings.HasPrefix(rep.Step.Spec, "pause:"):
			s.Reported = "paused"
		}
	}
	failed := condition(ds, rolloutapi.ConditionFailed)
	paused := condition(ds, rolloutapi.ConditionPaused)
	complete := condition(ds, rolloutapi.ConditionComplete)
	progressing := condition(ds, rolloutapi.ConditionProgressing)
	if failed != nil && failed.Reason == rolloutapi.ReasonInvalidSettings {
		// Not about a revision: no new template clears it, only fixed settings.
		s.Phase, s.Failed = rolloutapi.PhaseFailed, true
		s.Message = fmt.Sprintf("rollout of daemon set %q failed%s", ds.Name, reasonSuffix(failed))
		return
	}
	if ds.Generation > st.ObservedGeneration {
		s.Phase = rolloutapi.PhaseWaiting
		s.Message = "Waiting for daemon set spec update to be observed..."
		return
	}
	target := rep.Revision
	if currentRevision != "" && target != "" && !sameRevision(target, currentRevision, ds.Name) {
		// The conditions and annotations describe the previous revision (e.g. its failure) until
		// the controller has seen the new one; the counts are the DaemonSet controller's.
		s.Phase = rolloutapi.PhaseWaiting
		s.Message = fmt.Sprintf("Waiting for daemonguard's rollout controller to start rolling out revision %s of daemon set %q (it still reports on revision %s)", currentRevision, ds.Name, target)
		return
	}
	// The controller records a revision's failure in status.daemonguard.io/failed-revision before
	// it sets the Failed condition (annotations first, then status), so between the two writes of
	// a new report a Failed condition can still be the previous revision's: it counts only when
	// failed-revision names the revision being rolled out.
	staleFailure := ""
	if failed != nil {
		ref := currentRevision
		if ref == "" {
			ref = target
		}
		if fr := rep.FailedRevision; fr == "" || ref != "" && !sameRevision(fr, ref, ds.Name) {
			failed, staleFailure = nil, fr
			if staleFailure == "" {
				staleFailure = "an earlier revision"
			}
		}
	}
	switch {
	case staleFailure != "":
		s.Phase = rolloutapi.PhaseWaiting
		s.Message = fmt.Sprintf("Waiting for daemonguard's rollout controller to report on the current revision of daemon set %q (its Failed condition is about %s)", ds.Name, staleFailure)
	case failed != nil:
		reported()
		s.Phase, s.Failed = rolloutapi.PhaseFailed, true
		s.Message = fmt.Sprintf("rollout of daemon set %q failed%s", ds.Name, reasonSuffix(failed))
	case paused != nil:
		reported()
		s.Phase, s.Paused = rolloutapi.PhasePaused, true
		s.Message = fmt.Sprintf("rollout of daemon set %q is paused%s", ds.Name, reasonSuffix(paused))
	case complete != nil && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled && st.NumberAvailable >= st.DesiredNumberScheduled:
		// The controller's verdict plus the built-in controller's counts: a node that joined after
		// the controller said Complete may still be starting its pod.
		s.Phase, s.Done = rolloutapi.PhaseComplete, true
		s.Message = fmt.Sprintf("daemon set %q successfully rolled out", ds.Name)
		if complete.Message != "" {
			s.Message += " (" + complete.Message + ")"
		}
	case complete != nil:
		// Complete by the controller's count, not yet by the DaemonSet controller's: a pod still
		// starting (a node joined), or a report not yet written. The DaemonSet's counts alone.
		s.Phase = rolloutapi.PhaseProgressing
		s.Message = fmt.Sprintf("Waiting for daemon set %q rollout to finish: %d out of %d new pods have been updated, %d available...",
			ds.Name, st.UpdatedNumberScheduled, st.DesiredNumberScheduled, st.NumberAvailable)
	case progressing != nil:
		reported()
		if progressing.Reason == rolloutapi.ReasonBaking {
			s.Reported = bakingState(rep, a[rolloutapi.AnnotationBake])
		}
		s.Phase = rolloutapi.PhaseProgressing
		if progressing.Message != "" {
			s.Message = fmt.Sprintf("Waiting for daemon set %q rollout to finish: %s...", ds.Name, progressing.Message)
		} else {
			s.Message = fmt.Sprintf("Waiting for daemon set %q rollout to finish (%s)...", ds.Name, first(progressing.Reason, "no report yet"))
		}
	default:
		s.Phase = rolloutapi.PhaseWaiting
		s.Message = fmt.Sprintf("Waiting for daemonguard's rollout controller to report on daemon set %q (no rollout condition yet; if this persists, check that the controller is running)", ds.Name)
		if a[rolloutapi.AnnotationPaused] == "true" {
			s.Message += "; the rollout is set to pause (" + rolloutapi.AnnotationPaused + ": \"true\")"
		}
	}
}

// bakingState is the progress line's word for a bake: until when it runs, from the completion
// time the controller wrote and the bake the DaemonSet sets, so that it holds whenever it is read;
// "baking" when either is missing or malformed.
func bakingState(rep rolloutapi.Status, bake string) string {
	d, err := rolloutapi.ParseBake(bake)
	if err != nil || rep.CompletedAt.IsZero() {
		return "baking"
	}
	return "baking until " + rep.CompletedAt.Add(d).UTC().Format(time.RFC3339)
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// sameRevision compares the controller's status.daemonguard.io/revision with the current
// controller-revision-hash, accepting the ControllerRevision's name ("<ds>-<hash>") as well.
func sameRevision(reported, hash, dsName string) bool {
	return reported == hash || reported == dsName+"-"+hash
}

// condition returns the condition of type t if it is True.
func condition(ds *appsv1.DaemonSet, t appsv1.DaemonSetConditionType) *appsv1.DaemonSetCondition {
	for i := range ds.Status.Conditions {
		c := &ds.Status.Conditions[i]
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func reasonSuffix(c *appsv1.DaemonSetCondition) string {
	switch {
	case c.Reason != "" && c.Message != "":
		return ": " + c.Reason + ": " + c.Message
	case c.Reason != "":
		return ": " + c.Reason
	case c.Message != "":
		return ": " + c.Message
	}
	return ""
}

// measurementLines are the gates' last measurements, in gate order. A gate that holds the
// rollout paused says for how many measurements in a row and when it is measured again.
func measurementLines(a *rolloutapi.AnalysisStatus) []string {
	if a == nil {
		return nil
	}
	var lines []string
	for _, g := range a.Gates {
		m := g.Last
		if m == nil {
			continue
		}
		line := fmt.Sprintf("gate %s: %s at %s: %s", g.Name, m.Result, m.At.UTC().Format(time.RFC3339), m.Message)
		if g.Inconclusive > 0 {
			line += fmt.Sprintf(" (inconclusive %d in a row; measuring again at %s)", g.Inconclusive, g.Next.UTC().Truncate(time.Second).Format(time.RFC3339))
		}
		lines = append(lines, line)
	}
	return lines
}
