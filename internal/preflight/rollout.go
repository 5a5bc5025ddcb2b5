package preflight

import (
	"fmt"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/daemonguard/daemonguard/controller/rolloutanalysis"
	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Rollout is how the new revision reaches the nodes.
type Rollout struct {
	// Strategy is "managed" (daemonguard's rollout controller), "RollingUpdate" or "OnDelete".
	Strategy string `json:"strategy"`
	// Summary says it in one sentence.
	Summary string `json:"summary"`
	// ReadyAfter is the pod start time the estimate assumes: the median, from creation to
	// Ready, of the DaemonSet's ready pods today; zero and ReadyKnown false when none says.
	ReadyAfter time.Duration `json:"readyAfter"`
	ReadyKnown bool          `json:"readyKnown"`
	// Estimate is how long until every replaced node runs an available new pod; zero when
	// nothing is replaced or it does not end by itself (OnDelete).
	Estimate time.Duration `json:"estimate"`
	// Managed is the controller's rollout, wave by wave (managed only).
	Managed *rolloutplan.Timeline `json:"managed,omitempty"`
	// Batches is how many nodes the rolling update replaces at once, and Waves how many times
	// (RollingUpdate only).
	Batch int `json:"batch,omitempty"`
	Waves int `json:"waves,omitempty"`
	// Stalls says the rolling update stops before it has replaced every node: new pods that
	// cannot be scheduled hold its whole budget (RollingUpdate only). Which nodes it reaches
	// before that is not known in advance; the others keep the old revision.
	Stalls bool `json:"stalls,omitempty"`
}

// planRollout describes the rollout of plan's replaced nodes.
//
// Assumptions (RollingUpdate): the controller replaces up to maxUnavailable nodes at a time
// (maxSurge when it is set: new pods start next to the old ones), in no order it promises, and a
// wave takes ReadyAfter plus minReadySeconds. Gained nodes get their pod at once and do not wait.
//
// Invariant (RollingUpdate, the DaemonSet controller's rollingUpdate): a new pod that cannot be
// scheduled never becomes available, so it holds one unit of the budget for good: without surge
// every such pod does (gained nodes too), with surge those replacing an old pod. When they are at
// least the budget, the update stops once it has reached that many of them.
func planRollout(in Snapshot, p Impact) Rollout {
	ds := in.After
	r := Rollout{ReadyAfter: in.ReadyAfter, ReadyKnown: in.ReadyKnown}
	replaced := p.Summary.Replaced
	wave := in.ReadyAfter + time.Duration(ds.Spec.MinReadySeconds)*time.Second
	switch {
	case rolloutapi.IsManaged(ds):
		r.Strategy = "managed"
		if !p.NewRevision {
			r.Summary = "no new revision: the rollout controller has nothing to replace"
			return r
		}
		f, err := managedRollout(in)
		if err != nil {
			r.Summary = err.Error()
			return r
		}
		r.Managed, r.Estimate = f, f.Duration
		r.Summary = fmt.Sprintf("daemonguard replaces %d nodes in %d waves, budget %d; %s", replaced, len(f.Waves), f.Budget, f.Outcome)
	case strategyOf(ds) == appsv1.OnDeleteDaemonSetStrategyType:
		r.Strategy = string(appsv1.OnDeleteDaemonSetStrategyType)
		r.Summary = fmt.Sprintf("OnDelete: no pod is replaced until it is deleted; %d nodes keep the old revision until then, new nodes get the new one", replaced)
	default:
		r.Strategy = string(appsv1.RollingUpdateDaemonSetStrategyType)
		desired := p.Summary.Replaced + p.Summary.Unchanged + p.Summary.Gains
		surge, unavailable := maxSurge(ds, desired), maxUnavailable(ds, desired)
		r.Batch = unavailable
		how := fmt.Sprintf("maxUnavailable %d: deletes up to %s at a time and creates the new ones in their place", unavailable, pods(unavailable, "old"))
		if surge > 0 {
			r.Batch = surge
			how = fmt.Sprintf("maxSurge %d: starts up to %s next to the old ones, deleting each old pod once its replacement is available", surge, pods(surge, "new"))
		}
		if replaced > 0 {
			r.Waves = (replaced + r.Batch - 1) / r.Batch
			r.Estimate = time.Duration(r.Waves) * wave
		}
		r.Summary = fmt.Sprintf("RollingUpdate, %s, in no fixed order: %d nodes in %d waves", how, replaced, r.Waves)
		if stuck := stuckPods(p, surge > 0); replaced > 0 && stuck >= r.Batch {
			r.Stalls, r.Estimate = true, 0
			r.Summary += fmt.Sprintf("; it stalls: %s cannot be scheduled and the update may have only %d %s at a time, so it stops once it has reached %d of them; the nodes it has not reached keep the old revision",
				pods(stuck, "new"), r.Batch, map[bool]string{false: "unavailable", true: "surging"}[surge > 0], r.Batch)
		}
	}
	if !p.NewRevision {
		r.Summary = "no new revision: no pod is replaced"
	}
	return r
}

// stuckPods counts the new pods that cannot be scheduled and hold the rolling update's budget:
// every one without surge, those replacing an old pod with surge.
func stuckPods(p Impact, surge bool) int {
	n := 0
	for _, np := range p.Nodes {
		if np.Fit != nil && !np.Fit.Schedulable && (np.Change == Replaced || !surge) {
			n++
		}
	}
	return n
}

// maxSurge and maxUnavailable are the rolling update's budgets as node counts, resolved as the
// DaemonSet controller does (updatedDesiredNodeCounts): percents of the desired nodes rounded
// up, maxUnavailable 1 when both are zero, and 1 / 0 when unset as the API server defaults them.
func maxSurge(ds *appsv1.DaemonSet, desired int) int {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxSurge == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, desired, true)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func maxUnavailable(ds *appsv1.DaemonSet, desired int) int {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	v := intstr.FromInt32(1)
	if ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, desired, true)
	if err != nil || n < 0 {
		n = 0
	}
	if n == 0 && maxSurge(ds, desired) == 0 {
		n = 1
	}
	return n
}

// pods counts pods for people: "1 old pod", "2 new pods".
func pods(n int, kind string) string {
	if n == 1 {
		return "1 " + kind + " pod"
	}
	return fmt.Sprintf("%d %s pods", n, kind)
}

// --- the analysis check: the gates' queries run once against today's revision ---

// AnalysisCheck is a managed DaemonSet's analysis gates run once, before the rollout, against
// the revision its pods run today: a gate whose query finds no series for some node, or whose
// bounds some node already breaks, would hold the rollout (inconclusive) or halt it (failed) for
// reasons the new revision does not cause.
type AnalysisCheck struct {
	// Ran says the queries were run; when not, NotRun says why and how to run them.
	Ran    bool   `json:"ran"`
	NotRun string `json:"notRun,omitempty"`
	// Error says why the gates could not be checked at all: the annotation does not parse.
	Error string `json:"error,omitempty"`
	// Revision is the revision measured, the controller-revision-hash most of the DaemonSet's
	// pods run today: {{ revision }} and {{ old_revision }} both expand to it.
	Revision string `json:"revision,omitempty"`
	// Nodes are the nodes measured, {{ nodes }}: every node whose pod runs Revision, by name.
	Nodes []string `json:"nodes,omitempty"`
	// OtherRevisions counts the nodes left out because their pod runs another revision (a
	// rollout under way).
	OtherRevisions int `json:"otherRevisions,omitempty"`
	// Prometheus is the address queried, without any password.
	Prometheus string      `json:"prometheus,omitempty"`
	Gates      []GateCheck `json:"gates,omitempty"`
}

// GateCheck is one gate's query run once over Nodes, judged as the rollout judges a wave.
type GateCheck struct {
	Name string `json:"name"`
	// Query is the query with its placeholders expanded, as run (or as it would be run).
	Query string `json:"query,omitempty"`
	// Result is GatePass, GateFail, GateMissing, GateError or GateNotRun.
	Result string `json:"result"`
	// Measured counts the nodes with a value; Missing names every node without a series.
	Measured int      `json:"measured"`
	Missing  []string `json:"missing,omitempty"`
	// OutOfBounds are the nodes whose value already breaks the bounds, with the value.
	OutOfBounds []NodeValue `json:"outOfBounds,omitempty"`
	// Bound says the bounds, for a baseline gate judged today with the baseline median.
	Bound string `json:"bound,omitempty"`
	// Baseline is, for a baseline gate, BaselineToday or BaselineRollout; absent otherwise.
	Baseline string `json:"baseline,omitempty"`
	// Error is what Prometheus answered, or why it did not (GateError only).
	Error string `json:"error,omitempty"`
}

// NodeValue is a node's value. The value is a string as in Prometheus' HTTP API ("0.25",
// "+Inf"): JSON has no infinities, and a ratio over zero requests is one.
type NodeValue struct {
	Node  string `json:"node"`
	Value string `json:"value"`
}

// The results of a gate's check.
const (
	GatePass    = "pass"    // every node has a value within bounds
	GateFail    = "fail"    // some node is out of bounds already: the rollout would halt
	GateMissing = "missing" // some node has no series, none is out of bounds: the rollout would wait
	GateError   = "error"   // Prometheus did not answer: the rollout would wait
	GateNotRun  = "not run"
)

// How a baseline gate is judged today (GateCheck.Baseline).
const (
	// BaselineToday: each node against the median of every node measured, itself included.
	// Today every node runs the same revision, so a node that breaks the bound against the fleet
	// would break it against the old-revision nodes of its wave's baseline, new revision or not.
	BaselineToday = "today"
	// BaselineRollout: too few nodes have a value for a median that one odd node does not move;
	// the gate is judged during the rollout only, against old-revision nodes, and the check
	// reports its missing series only.
	BaselineRollout = "rollout"
)

// minSelfBaseline is how many nodes must have a value before a baseline gate is judged against
// their own median: with fewer, one odd node moves the median as far as it is off.
const minSelfBaseline = 3

// gateRun is what the check measures: the gates and their queries, in the same order.
type gateRun struct {
	gates []rolloutapi.Gate
	req   rolloutanalysis.Request
}

// analysisCheck is the check of ds, stored after the apply, before anything is measured: nil when
// ds is not managed or has no gates; without a run when there is nothing to measure (no pod runs
// today) or the gates do not parse; else the gates' queries rendered for today's revision on the
// nodes that run it (nodes are the plan's, their pods today), all marked GateNotRun.
func analysisCheck(ds *appsv1.DaemonSet, nodes []NodeImpact) (*AnalysisCheck, *gateRun) {
	if !rolloutapi.IsManaged(ds) {
		return nil, nil
	}
	gates, err := rolloutapi.ParseGates(ds.Annotations[rolloutapi.AnnotationAnalysis])
	switch {
	case err != nil:
		return &AnalysisCheck{Error: fmt.Sprintf("%s: %v", rolloutapi.AnnotationAnalysis, err)}, nil
	case len(gates) == 0:
		return nil, nil
	}
	c := &AnalysisCheck{}
	counts := map[string]int{}
	for _, n := range nodes {
		if n.Today != nil && n.Today.Revision != "" {
			counts[n.Today.Revision]++
		}
	}
	for rev, n := range counts {
		if c.Revision == "" || n > counts[c.Revision] || (n == counts[c.Revision] && rev < c.Revision) {
			c.Revision = rev
		}
	}
	for _, n := range nodes {
		switch {
		case n.Today == nil:
		case n.Today.Revision == c.Revision:
			c.Nodes = append(c.Nodes, n.Node)
		default:
			c.OtherRevisions++
		}
	}
	if len(c.Nodes) == 0 {
		c.NotRun = "no pod of the DaemonSet runs today, so there is nothing to measure; a DaemonSet's first revision is not measured"
		for _, g := range gates {
			c.Gates = append(c.Gates, GateCheck{Name: g.Name, Result: GateNotRun})
		}
		return c, nil
	}
	vars := rolloutapi.QueryVars{Nodes: c.Nodes, Revision: c.Revision, OldRevision: c.Revision, Name: ds.Name, Namespace: ds.Namespace}
	run := &gateRun{gates: gates, req: rolloutanalysis.Request{Wave: c.Nodes}}
	for _, g := range gates {
		// One query per gate: a baseline gate's own values are its baseline today.
		q := rolloutanalysis.GateQuery{Gate: g.Name, NodeLabel: g.NodeLabel, Wave: rolloutapi.RenderQuery(g.Query, vars)}
		run.req.Queries = append(run.req.Queries, q)
		c.Gates = append(c.Gates, GateCheck{Name: g.Name, Query: q.Wave, Result: GateNotRun})
	}
	return c, run
}

// judgeGates is the verdict on each gate of run from Prometheus' answers, ms (one per query, any
// order), over the nodes measured: the rollout's own judgement (rolloutanalysis.Judge), with the
// measured nodes as the baseline of a baseline gate when enough of them have a value.
func judgeGates(run gateRun, ms []rolloutanalysis.Measurement) []GateCheck {
	nodes := run.req.Wave
	out := make([]GateCheck, len(run.gates))
	for i, g := range run.gates {
		gc := GateCheck{Name: g.Name, Query: run.req.Queries[i].Wave}
		var m *rolloutanalysis.Measurement
		for j := range ms {
			if ms[j].Gate == g.Name {
				m = &ms[j]
			}
		}
		switch {
		case m == nil:
			gc.Result, gc.Error = GateError, "not measured"
		case m.Err != "":
			gc.Result, gc.Error = GateError, m.Err
		default:
			judged := *m
			var baseline []string
			if g.Baseline {
				gc.Baseline = BaselineRollout
				// Judge counts the nodes with a value as the rollout does: NaN is none.
				if rolloutanalysis.Judge(g, judged, nodes, nil).Measured >= minSelfBaseline {
					gc.Baseline, judged.Baseline, baseline = BaselineToday, judged.Values, nodes
				}
			}
			j := rolloutanalysis.Judge(g, judged, nodes, baseline)
			gc.Measured, gc.Missing, gc.Bound = j.Measured, j.Missing, j.Bound
			for _, nv := range j.OutOfBounds {
				gc.OutOfBounds = append(gc.OutOfBounds, NodeValue{Node: nv.Node, Value: strconv.FormatFloat(nv.Value, 'g', -1, 64)})
			}
			switch {
			case len(gc.OutOfBounds) > 0:
				gc.Result = GateFail
			case len(gc.Missing) > 0:
				gc.Result = GateMissing
			default:
				gc.Result = GatePass
			}
		}
		out[i] = gc
	}
	return out
}

// finding says the check found what would stop the rollout: a gate that fails, lacks a series
// or got no answer, or gates that do not parse. A check not run finds nothing.
func (c *AnalysisCheck) finding() bool {
	if c == nil {
		return false
	}
	if c.Error != "" {
		return true
	}
	for _, g := range c.Gates {
		if g.Result != GatePass && g.Result != GateNotRun {
			return true
		}
	}
	return false
}
