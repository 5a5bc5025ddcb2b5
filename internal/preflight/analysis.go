package preflight

// This file is the analysis check: a managed DaemonSet's gates' queries rendered for the revision
// its pods run today (analysisCheck, pure), run once through the controller's Prometheus client
// (checkAnalysis), and judged with the rollout's own judgement (judgeGates, pure).

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

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
	OutOfBounds []OutOfBoundsNode `json:"outOfBounds,omitempty"`
	// Bound says the bounds, for a baseline gate judged today with the baseline median.
	Bound string `json:"bound,omitempty"`
	// Baseline is, for a baseline gate, BaselineToday or BaselineRollout; absent otherwise.
	Baseline string `json:"baseline,omitempty"`
	// Error is what Prometheus answered, or why it did not (GateError only).
	Error string `json:"error,omitempty"`
}

// OutOfBoundsNode is a node whose value already breaks a gate's bounds, with the value as text as
// in Prometheus' HTTP API ("0.25", "+Inf"): JSON has no infinities, and a ratio over zero requests
// is one. rolloutanalysis.Judge reports it as a number (rolloutanalysis.NodeValue).
type OutOfBoundsNode struct {
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

// gatesNotRun says why the analysis check did not run without a Prometheus, and how to run it.
const gatesNotRun = "no --prometheus-address: pass the controller's (with --prometheus-ca-file and --prometheus-bearer-token-file as it has them) to run each gate's query once against the revision the pods run today"

// checkAnalysis runs each analysis gate's query of the stored DaemonSet once, through the
// controller's Prometheus client, kept to scope as the controller keeps it (outside namespaces
// marked for node agents, to the DaemonSet's namespace's series), against the revision its pods
// run today (analysisCheck), and judges the answers (judgeGates). Without a Prometheus address
// nothing is run, and the check says how to run it. Prometheus not answering is the gate's
// result, never an error of the plan.
func checkAnalysis(ctx context.Context, prom *promquery.Client, ds *appsv1.DaemonSet, nodes []NodeImpact, scope rolloutanalysis.Scope) *AnalysisCheck {
	c, run := analysisCheck(ds, nodes)
	if run == nil {
		return c
	}
	// The plan shows each query as Prometheus is asked it; one that cannot be scoped is shown as
	// written, and its measurement says why it was not run.
	for i, q := range run.req.Queries {
		if scoped, err := scope.Apply(q.Wave); err == nil {
			run.req.Queries[i].Wave, c.Gates[i].Query = scoped, scoped
		}
	}
	if prom == nil || prom.Address() == "" {
		c.NotRun = gatesNotRun
		return c
	}
	c.Ran, c.Prometheus = true, prom.Address()
	c.Gates = judgeGates(*run, prom.Measure(ctx, run.req, scope))
	return c
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
				gc.OutOfBounds = append(gc.OutOfBounds, OutOfBoundsNode{Node: nv.Node, Value: strconv.FormatFloat(nv.Value, 'g', -1, 64)})
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
