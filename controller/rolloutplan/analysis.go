package rolloutplan

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// AnalysisRequest is what a reconcile must measure before it plans: the queries of every gate
// whose measurement is due, rendered for the wave and, for a baseline gate, for its baseline.
// DueAnalysis makes it; the controller runs the queries and hands the answers to Compute as
// RolloutState.Measurements.
type AnalysisRequest struct {
	Queries []GateQuery
}

// GateQuery is one gate's measurement to take.
type GateQuery struct {
	Gate      string
	NodeLabel string // the result label that names the node
	// Wave is the query over the wave's nodes; Baseline over the baseline nodes, "" without one.
	Wave, Baseline string
}

// Measurement is what Prometheus answered to a GateQuery: one value per node that has a sample.
type Measurement struct {
	Gate     string
	Values   map[string]float64 // node -> value of the wave query
	Baseline map[string]float64 // node -> value of the baseline query
	// Err says why there is no answer (Prometheus unreachable or not configured, a query it
	// rejects); the measurement is then inconclusive.
	Err string
}

// maxBaselineNodes bounds the nodes a baseline query names: enough for a median that one odd
// node does not move, and a query that stays short on a large cluster.
const maxBaselineNodes = 20

// DueAnalysis is the measurement a reconcile must take before Compute, or nil when none is due.
// It decides from the same state, with the same planner, as Compute: the wave, the baseline and
// which gates are due are Compute's.
func DueAnalysis(in RolloutState) *AnalysisRequest {
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
	var req AnalysisRequest
	for i, g := range in.Settings.Gates {
		if in.Now.Before(a.Gates[i].Next) {
			continue
		}
		q := GateQuery{Gate: g.Name, NodeLabel: g.NodeLabel, Wave: rolloutapi.RenderQuery(g.Query, vars(wave))}
		if g.Baseline && len(baseline) > 0 {
			q.Baseline = rolloutapi.RenderQuery(g.Query, vars(baseline))
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
	if p.status.Analysis != nil {
		since = p.status.Analysis.VerifiedAt
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
// the new pods' series exist and rate windows cover them.
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
//
// Invariants:
//   - Nothing is deleted while a wave waits to be measured or is measured: only replace deletes,
//     and it runs after this check lets the rollout go on.
//   - A wave is measured once no node is on its way to the new revision (moving); until then the
//     progress deadline bounds the wait.
//   - No data is not a pass: a node of the wave without a sample, a baseline without one, or no
//     answer from Prometheus makes the measurement inconclusive. The rollout pauses
//     (AnalysisInconclusive), says why, and measures again after the gate's interval; the gate's
//     count of passed measurements is kept, not advanced.
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
	var failed, inconclusive, waiting []string
	for i, g := range p.in.Settings.Gates {
		gs := &a.Gates[i]
		if p.in.Now.Before(gs.Next) {
			waiting = append(waiting, fmt.Sprintf("%s %d/%d passed", g.Name, gs.Passed, g.Count))
			continue
		}
		m := measurementOf(p.in.Measurements, g.Name)
		result, msg := judge(g, m, wave, baseline)
		gs.Last = &rolloutapi.GateMeasurement{At: p.in.Now, Result: result, Message: msg}
		gs.Next = p.in.Now.Add(g.Interval)
		switch result {
		case rolloutapi.MeasurementFailed:
			failed = append(failed, fmt.Sprintf("gate %s: %s", g.Name, msg))
		case rolloutapi.MeasurementInconclusive:
			inconclusive = append(inconclusive, fmt.Sprintf("gate %s: %s", g.Name, msg))
		default:
			gs.Passed++
			if gs.Passed < g.Count {
				waiting = append(waiting, fmt.Sprintf("%s %d/%d passed", g.Name, gs.Passed, g.Count))
			}
		}
	}
	p.status.Analysis = &a
	p.status.Progress = p.in.Now
	if len(failed) > 0 {
		cause := fmt.Sprintf("analysis of %s failed: %s", nodeCount(wave), strings.Join(failed, "; "))
		if to := p.oldRevision(); p.in.Settings.RollbackOnAnalysisFailure && to != "" {
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
	if len(inconclusive) > 0 {
		return p.finish(rolloutapi.PhasePaused, rolloutapi.ReasonAnalysisInconclusive, fmt.Sprintf("step %s: the analysis of %s is inconclusive: %s; nothing is replaced until it has data; measuring again in %s",
			step, nodeCount(wave), strings.Join(inconclusive, "; "), roundUp(p.plan.RequeueAfter))), true
	}
	return p.finish(rolloutapi.PhaseProgressing, rolloutapi.ReasonAnalysisRunning, fmt.Sprintf("step %s: %d of %d nodes updated; analysing %s (%s): %s; next measurement in %s",
		step, p.plan.Updated, p.plan.Desired, nodeCount(wave), listNodes(wave), strings.Join(waiting, ", "), roundUp(p.plan.RequeueAfter))), true
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

func measurementOf(ms []Measurement, gate string) *Measurement {
	for i := range ms {
		if ms[i].Gate == gate {
			return &ms[i]
		}
	}
	return nil
}

// judge is one gate's result on the wave: Failed naming the nodes out of bounds and their
// values (the first few, a count of the rest), Inconclusive saying what data is missing, or
// Passed.
func judge(g rolloutapi.Gate, m *Measurement, wave, baseline []string) (result, message string) {
	switch {
	case m == nil:
		return rolloutapi.MeasurementInconclusive, "not measured"
	case m.Err != "":
		return rolloutapi.MeasurementInconclusive, "no answer from Prometheus: " + m.Err
	}
	var missing []string
	for _, n := range wave {
		if v, ok := m.Values[n]; !ok || math.IsNaN(v) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return rolloutapi.MeasurementInconclusive, fmt.Sprintf("no sample labelled %s for %d of %d nodes: %s", g.NodeLabel, len(missing), len(wave), listNodes(missing))
	}
	ref, bound := 0.0, boundText(g)
	if g.Baseline {
		var values []float64
		for _, n := range baseline {
			if v, ok := m.Baseline[n]; ok && !math.IsNaN(v) {
				values = append(values, v)
			}
		}
		if len(values) == 0 {
			return rolloutapi.MeasurementInconclusive, fmt.Sprintf("no baseline: no sample labelled %s for any of %d baseline nodes (%s)", g.NodeLabel, len(baseline), listNodes(baseline))
		}
		ref = median(values)
		bound = fmt.Sprintf("%s of the baseline median %s (%d nodes)", bound, formatValue(ref), len(values))
	}
	var out []string
	for _, n := range wave {
		v := m.Values[n]
		if (g.Max != nil && v-ref > *g.Max) || (g.Min != nil && v-ref < *g.Min) {
			out = append(out, n+"="+formatValue(v))
		}
	}
	if len(out) > 0 {
		return rolloutapi.MeasurementFailed, fmt.Sprintf("%d of %d nodes out of bounds (%s): %s", len(out), len(wave), bound, listNodes(out))
	}
	return rolloutapi.MeasurementPassed, fmt.Sprintf("%d nodes within bounds (%s)", len(wave), bound)
}

// boundText says a gate's bounds: "max 0.05", "min 1", "min 1, max 5".
func boundText(g rolloutapi.Gate) string {
	var parts []string
	if g.Min != nil {
		parts = append(parts, "min "+formatValue(*g.Min))
	}
	if g.Max != nil {
		parts = append(parts, "max "+formatValue(*g.Max))
	}
	return strings.Join(parts, ", ")
}

func formatValue(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func median(values []float64) float64 {
	s := slices.Clone(values)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func nodeCount(nodes []string) string {
	if len(nodes) == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", len(nodes))
}

// roundUp shows a wait in whole seconds, never "0s".
func roundUp(d time.Duration) time.Duration {
	return max((d + time.Second - 1).Truncate(time.Second), time.Second)
}

// analysisFailedCause names the failed gates of an earlier reconcile's halt, as it recorded them.
func analysisFailedCause(a *rolloutapi.AnalysisStatus) string {
	var failed []string
	if a != nil {
		for _, g := range a.Gates {
			if g.Last != nil && g.Last.Result == rolloutapi.MeasurementFailed {
				failed = append(failed, fmt.Sprintf("gate %s: %s", g.Name, g.Last.Message))
			}
		}
	}
	if len(failed) == 0 {
		return "the analysis failed"
	}
	return "the analysis failed: " + strings.Join(failed, "; ")
}
