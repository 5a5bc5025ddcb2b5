package rolloutplan

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// gated is settings with analysis gates parsed from their annotation, as the controller reads them.
func gated(maxUnavailable, gates string, rollback bool) rolloutapi.Settings {
	a := map[string]string{rolloutapi.AnnotationMaxUnavailable: maxUnavailable, rolloutapi.AnnotationAnalysis: gates}
	if rollback {
		a[rolloutapi.AnnotationOnAnalysisFailure] = rolloutapi.OnAnalysisFailureRollback
	}
	s, err := rolloutapi.ParseSettings(a)
	if err != nil {
		panic(err)
	}
	return s
}

const (
	errorsGate = `- {name: errors, query: 'sum by (node) (rate(errors_total{node=~"{{ nodes }}"}[1m]))', max: 0.1, interval: 30s, count: 2}`
	noiseGate  = `- {name: errors, query: 'sum by (node) (rate(errors_total{node=~"{{ nodes }}"}[1m]))', max: 0.1, interval: 30s, count: 1, baseline: true}`
)

// analysing is the status of a rollout whose first wave is under analysis: the errors gate has
// passed `passed` measurements and its next one is due at t0.
func analysing(wave, passed int) rolloutapi.Status {
	return rolloutapi.Status{Revision: newRev, StepStarted: t0.Add(-time.Minute), Progress: t0.Add(-time.Minute),
		Analysis: &rolloutapi.AnalysisStatus{VerifiedAt: t0.Add(-2 * time.Hour), Wave: wave,
			Gates: []rolloutapi.GateStatus{{Name: "errors", Passed: passed, Next: t0}}}}
}

// haltedByAnalysis is the status of a rollout its analysis halted: the errors gate's last
// measurement failed on node a.
func haltedByAnalysis() rolloutapi.Status {
	s := analysing(1, 1)
	s.FailedRevision = newRev
	s.Analysis.Gates[0].Last = &rolloutapi.GateMeasurement{At: t0, Result: rolloutapi.MeasurementFailed, Message: "1 of 1 nodes out of bounds (max 0.1): a=0.25"}
	return s
}

func values(kv ...any) map[string]float64 {
	m := map[string]float64{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1].(float64)
	}
	return m
}

func TestAnalysis(t *testing.T) {
	// The wave is node a: its new pod has been Ready for an hour; b, c and d still run the old one.
	wave := append([]NodeState{node("a", pod(newRev, "ready"))}, node("b", pod(oldRev, "ready")), node("c", pod(oldRev, "ready")), node("d", pod(oldRev, "ready")))
	tests := map[string]struct {
		nodes            []NodeState
		settings         rolloutapi.Settings
		status           rolloutapi.Status
		previousFailure  string
		measurements     []rolloutanalysis.Measurement
		kept             []string // revision hashes whose ControllerRevision exists
		wantDelete       []string
		wantPhase        rolloutapi.Phase
		wantReason       string
		wantInMsg        []string
		wantPassed       int    // the errors gate's passed count after the plan; -1: the wave passed; -2: nothing replaced
		wantRollbackTo   string // Plan.RollbackTo
		wantRequeueAfter time.Duration
	}{
		"a new wave waits one interval before its first measurement and deletes nothing": {
			nodes: wave, settings: gated("1", errorsGate, false),
			status:    rolloutapi.Status{Revision: newRev, Progress: t0, Analysis: &rolloutapi.AnalysisStatus{VerifiedAt: t0.Add(-2 * time.Hour)}},
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonAnalysisRunning,
			wantInMsg: []string{"analysing 1 node (a)", "errors 0/2 passed", "next measurement at 2026-11-23T10:00:30Z"}, wantRequeueAfter: 30 * time.Second,
		},
		"a DaemonSet's first revision replaces nothing and completes without a measurement": {
			nodes: []NodeState{node("a", pod(newRev, "ready")), node("b", pod(newRev, "ready"))}, settings: gated("1", errorsGate, false),
			wantPhase: rolloutapi.PhaseComplete, wantReason: rolloutapi.ReasonComplete, wantPassed: -2,
		},
		"a passing measurement counts and the next one waits": {
			nodes: wave, settings: gated("1", errorsGate, false), status: analysing(1, 0),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 0.01)}},
			wantPhase:    rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonAnalysisRunning, wantPassed: 1,
			wantInMsg: []string{"errors 1/2 passed"}, wantRequeueAfter: 30 * time.Second,
		},
		"the last passing measurement lets the rollout delete the next wave": {
			nodes: wave, settings: gated("1", errorsGate, false), status: analysing(1, 1),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 0.01)}},
			wantDelete:   []string{"b"}, wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonProgressing, wantPassed: -1,
		},
		"a node above max halts the rollout naming the gate, the node and its value": {
			nodes: wave, settings: gated("1", errorsGate, false), status: analysing(1, 1),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 0.25)}},
			wantPhase:    rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonAnalysisFailed, wantPassed: 1,
			wantInMsg: []string{"gate errors: 1 of 1 nodes out of bounds (max 0.1): a=0.25", "daemonguard rollout undo"},
		},
		"with rollback opted in a failed gate rolls back to the old revision": {
			nodes: wave, settings: gated("1", errorsGate, true), status: analysing(1, 1), kept: []string{oldRev, newRev},
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 0.25)}},
			wantPhase:    rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonAnalysisFailed, wantPassed: 1, wantRollbackTo: oldRev,
			wantInMsg: []string{"rolling back: the template of revision old is put back"},
		},
		"with rollback opted in but the old revision pruned, a failed gate halts and says so": {
			nodes: wave, settings: gated("1", errorsGate, true), status: analysing(1, 1), kept: []string{newRev},
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 0.25)}},
			wantPhase:    rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonAnalysisFailed, wantPassed: 1,
			wantInMsg: []string{"no ControllerRevision of revision old is left to roll back to", "daemonguard rollout undo"},
		},
		"a rollback that fails its gates halts rather than going back to the failed revision": {
			nodes: wave, settings: gated("1", errorsGate, true),
			status:       func() rolloutapi.Status { s := analysing(1, 1); s.FailedRevision = oldRev; return s }(),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 0.25)}},
			wantPhase:    rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonAnalysisFailed, wantPassed: 1,
			wantInMsg: []string{"daemonguard rollout undo"},
		},
		"a node without a sample is inconclusive: the rollout pauses and measures again": {
			nodes: wave, settings: gated("1", errorsGate, false), status: analysing(1, 1),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("z", 0.0)}},
			wantPhase:    rolloutapi.PhasePaused, wantReason: rolloutapi.ReasonAnalysisInconclusive, wantPassed: 1,
			wantInMsg: []string{"no sample labelled node for 1 of 1 nodes: a", "nothing is replaced until it has data", "measuring again at 2026-11-23T10:00:30Z"}, wantRequeueAfter: 30 * time.Second,
		},
		"Prometheus not answering is inconclusive, never a pass": {
			nodes: wave, settings: gated("1", errorsGate, false), status: analysing(1, 1),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Err: "connection refused"}},
			wantPhase:    rolloutapi.PhasePaused, wantReason: rolloutapi.ReasonAnalysisInconclusive, wantPassed: 1,
			wantInMsg: []string{"no answer from Prometheus: connection refused"},
		},
		"a due gate the controller did not measure is inconclusive": {
			nodes: wave, settings: gated("1", errorsGate, false), status: analysing(1, 1),
			wantPhase: rolloutapi.PhasePaused, wantReason: rolloutapi.ReasonAnalysisInconclusive, wantPassed: 1,
			wantInMsg: []string{"gate errors: not measured"},
		},
		"a baseline gate passes noise that every node shares": {
			nodes: wave, settings: gated("1", noiseGate, false), status: analysing(1, 0),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 5.0), Baseline: values("b", 4.95, "c", 5.0, "d", 40.0)}},
			wantDelete:   []string{"b"}, wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonProgressing, wantPassed: -1,
		},
		"a baseline gate fails a node above the baseline median": {
			nodes: wave, settings: gated("1", noiseGate, false), status: analysing(1, 0),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 5.5), Baseline: values("b", 4.95, "c", 5.0, "d", 5.1)}},
			wantPhase:    rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonAnalysisFailed,
			wantInMsg: []string{"a=5.5", "max 0.1 of the baseline median 5 (3 nodes)"},
		},
		"a baseline gate without baseline samples is inconclusive": {
			nodes: wave, settings: gated("1", noiseGate, false), status: analysing(1, 0),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 5.5)}},
			wantPhase:    rolloutapi.PhasePaused, wantReason: rolloutapi.ReasonAnalysisInconclusive,
			wantInMsg: []string{"no baseline: no sample labelled node for any of 3 baseline nodes (b, c, d)"},
		},
		"a wave still moving is measured only once every node of it is available": {
			nodes:    []NodeState{node("a", pod(newRev, "ready")), node("b", pod(newRev, "notready")), node("c", pod(oldRev, "ready"))},
			settings: gated("2", errorsGate, false), status: analysing(1, 0),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonAnalysisRunning, wantPassed: 0,
			wantInMsg: []string{"the analysis of 1 node waits for 1 more nodes to become available"},
		},
		"a wave that grew starts its measurements again": {
			nodes:    []NodeState{node("a", pod(newRev, "ready")), node("b", pod(newRev, "ready")), node("c", pod(oldRev, "ready"))},
			settings: gated("2", errorsGate, false), status: analysing(1, 1),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonAnalysisRunning, wantPassed: 0,
			wantInMsg: []string{"analysing 2 nodes (a, b)", "errors 0/2 passed"},
		},
		"the last wave is analysed before the rollout completes": {
			nodes: []NodeState{node("a", pod(newRev, "ready"))}, settings: gated("1", errorsGate, false), status: analysing(1, 1),
			measurements: []rolloutanalysis.Measurement{{Gate: "errors", Values: values("a", 0.0)}},
			wantPhase:    rolloutapi.PhaseComplete, wantReason: rolloutapi.ReasonComplete, wantPassed: -1,
		},
		"a revision halted by its analysis stays halted, naming the failed gate": {
			nodes: wave, settings: gated("1", errorsGate, false), previousFailure: rolloutapi.ReasonAnalysisFailed,
			status:    haltedByAnalysis(),
			wantPhase: rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonAnalysisFailed, wantPassed: 1,
			wantInMsg: []string{"the analysis failed: gate errors: 1 of 1 nodes out of bounds (max 0.1): a=0.25"},
		},
		"a revision halted by its analysis, seen before its Failed condition is written, says so": {
			nodes: wave, settings: gated("1", errorsGate, false),
			status:    haltedByAnalysis(),
			wantPhase: rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonAnalysisFailed, wantPassed: 1,
			wantInMsg: []string{"the analysis failed: gate errors: 1 of 1 nodes out of bounds (max 0.1): a=0.25"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := RolloutState{Name: "agent", Namespace: "ns", TargetRevision: newRev, Nodes: tc.nodes, Settings: tc.settings,
				Status: tc.status, PreviousFailure: tc.previousFailure, Measurements: tc.measurements, KeptRevisions: tc.kept, Now: t0}
			plan := Compute(in)
			if got := deletedNodes(plan); !slices.Equal(got, tc.wantDelete) {
				t.Errorf("deleted %v, want %v", got, tc.wantDelete)
			}
			if plan.Phase != tc.wantPhase || plan.Reason != tc.wantReason {
				t.Errorf("phase %s/%s, want %s/%s: %s", plan.Phase, plan.Reason, tc.wantPhase, tc.wantReason, plan.Message)
			}
			for _, want := range tc.wantInMsg {
				if !strings.Contains(plan.Message, want) {
					t.Errorf("message %q does not say %q", plan.Message, want)
				}
			}
			if plan.RollbackTo != tc.wantRollbackTo {
				t.Errorf("RollbackTo %q, want %q", plan.RollbackTo, tc.wantRollbackTo)
			}
			if tc.wantRequeueAfter != 0 && plan.RequeueAfter != tc.wantRequeueAfter {
				t.Errorf("RequeueAfter %s, want %s", plan.RequeueAfter, tc.wantRequeueAfter)
			}
			a := plan.Status.Analysis
			switch {
			case tc.wantPassed == -2:
				if a == nil || !a.NothingReplaced {
					t.Errorf("analysis %+v, want nothing replaced", a)
				}
			case tc.wantPassed < 0 && (a == nil || a.Wave != 0 || a.VerifiedAt != t0):
				t.Errorf("analysis %+v, want the wave passed at %s", a, t0)
			case tc.wantPassed >= 0 && (a == nil || len(a.Gates) != 1 || a.Gates[0].Passed != tc.wantPassed):
				t.Errorf("analysis %+v, want the errors gate at %d passed", a, tc.wantPassed)
			}
		})
	}
}

func TestDueAnalysisRendersTheWaveAndItsBaseline(t *testing.T) {
	nodes := []NodeState{
		node("a.example", zone("z1"), pod(newRev, "ready")), node("b", zone("z1"), pod(oldRev, "ready")),
		node("c", zone("z2"), pod(oldRev, "ready")),
	}
	s := gated("1", noiseGate, false)
	s.TopologyKey = "zone"
	in := RolloutState{Name: "agent", Namespace: "ns", TargetRevision: newRev, Nodes: nodes, Settings: s, Status: analysing(1, 0), Now: t0}
	req := DueAnalysis(in)
	if req == nil || len(req.Queries) != 1 {
		t.Fatalf("DueAnalysis = %+v, want the errors gate", req)
	}
	q := req.Queries[0]
	if want := `sum by (node) (rate(errors_total{node=~"a\\.example"}[1m]))`; q.Wave != want {
		t.Errorf("wave query %s, want %s", q.Wave, want)
	}
	if want := `sum by (node) (rate(errors_total{node=~"b"}[1m]))`; q.Baseline != want {
		t.Errorf("baseline query %s, want %s: the old node of the wave's zone", q.Baseline, want)
	}
	if q.Gate != "errors" || q.NodeLabel != "node" {
		t.Errorf("query %+v, want gate errors by label node", q)
	}

	tests := map[string]RolloutState{
		"before the gate's next measurement is due": func() RolloutState { c := in; c.Now = t0.Add(-time.Second); return c }(),
		"while a node of the wave is still moving": func() RolloutState {
			c := in
			c.Nodes = append(slices.Clone(nodes), node("d", zone("z1"), pod(newRev, "notready")))
			return c
		}(),
		"for a revision halted before": func() RolloutState { c := in; c.Status.FailedRevision = newRev; return c }(),
		"without gates":                func() RolloutState { c := in; c.Settings = settings("1", ""); return c }(),
	}
	for name, c := range tests {
		if req := DueAnalysis(c); req != nil {
			t.Errorf("%s: DueAnalysis = %+v, want nothing due", name, req)
		}
	}
}
