package rolloutplan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// maxBaselineNodes bounds the nodes a baseline query names: enough for a median that one odd
// node does not move, and a query that stays short on a large cluster.
const maxBaselineNodes = 20

// DueAnalysis is the measurement a reconcile must take before Compute, or nil when none is due.
// It decides from the same state, with the same planner, as Compute: the wave, the baseline and
// which gates are due are Compute's.
func DueAnalysis(in RolloutState) *rolloutanalysis.Request {
	return dueAnalysis(in, nil)
}

// dueAnalysis is DueAnalysis with the scratch memory s (see compute).
func dueAnalysis(in RolloutState, s *scratch) *rolloutanalysis.Request {
	if len(in.Settings.Gates) == 0 {
		return nil // no gate is ever due; the planner would classify every node to say so
	}
	p := newPlanner(in, s)
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
	next := nextMeasurement(a)
	p.plan.RequeueAfter = max(next.Sub(p.in.Now), time.Second)
	step := p.stepLabel(p.status.Step.Index)
	if inconclusive := InconclusiveGates(&a); len(inconclusive) > 0 {
		plan := p.finish(rolloutapi.PhasePaused, rolloutapi.ReasonAnalysisInconclusive, fmt.Sprintf("step %s: the analysis of %s is inconclusive: %s; nothing is replaced until it has data; measuring again at %s",
			step, nodeCount(wave), strings.Join(inconclusive, "; "), shownAt(next)))
		plan.CauseChanged = !slices.Equal(inconclusive, InconclusiveGates(p.in.Status.Analysis))
		return plan, true
	}
	return p.finish(rolloutapi.PhaseProgressing, rolloutapi.ReasonAnalysisRunning, fmt.Sprintf("step %s: %d of %d nodes updated; analysing %s (%s): %s; next measurement at %s",
		step, p.plan.Updated, p.plan.Desired, nodeCount(wave), kubetext.List(wave), strings.Join(waiting, ", "), shownAt(next))), true
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

// nextMeasurement is when the first gate's next measurement is due.
func nextMeasurement(a rolloutapi.AnalysisStatus) time.Time {
	var next time.Time
	for _, g := range a.Gates {
		if next.IsZero() || g.Next.Before(next) {
			next = g.Next
		}
	}
	return next
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

// shownAt is a moment as messages show it. Messages name the scheduled time, not a wait or the
// time of the requeue (which has a floor): a message that depended on the reconcile's clock
// would change between measurements, be written again, and look like a new cause to a
// reconcile that reads the new annotations beside the old condition.
func shownAt(t time.Time) string {
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
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
