package preflight

import (
	"math"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// bound is a gate bound, for literals.
func bound(v float64) *float64 { return &v }

// TestJudgeGates holds the check's verdict on each gate: the rollout's judgement of a wave,
// applied to every node that runs today's revision, with a baseline gate judged against the
// nodes themselves only when enough of them have a value.
func TestJudgeGates(t *testing.T) {
	errors := rolloutapi.Gate{Name: "errors", Max: bound(0.05), NodeLabel: "node"}
	drops := rolloutapi.Gate{Name: "drops", Max: bound(0.5), NodeLabel: "node", Baseline: true}
	nodes := []string{"a", "b", "c", "d"}
	vals := func(kv ...any) map[string]float64 {
		m := map[string]float64{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(float64)
		}
		return m
	}
	tests := map[string]struct {
		gate  rolloutapi.Gate
		nodes []string
		m     []rolloutanalysis.Measurement
		want  GateCheck
	}{
		"every node within bounds passes, the bound included": {
			gate: errors, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "errors", Values: vals("a", 0.0, "b", 0.05, "c", 0.01, "d", 0.02)}},
			want: GateCheck{Result: GatePass, Measured: 4, Bound: "max 0.05"},
		},
		"a node out of bounds fails, with its value": {
			gate: errors, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "errors", Values: vals("a", 0.0, "b", 0.25, "c", 0.01, "d", math.Inf(1))}},
			want: GateCheck{Result: GateFail, Measured: 4, Bound: "max 0.05", OutOfBounds: []OutOfBoundsNode{{"b", "0.25"}, {"d", "+Inf"}}},
		},
		"a node without a series, or with NaN, is missing": {
			gate: errors, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "errors", Values: vals("a", 0.0, "b", math.NaN())}},
			want: GateCheck{Result: GateMissing, Measured: 1, Missing: []string{"b", "c", "d"}, Bound: "max 0.05"},
		},
		"failing and missing nodes are both reported; the gate fails": {
			gate: errors, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "errors", Values: vals("a", 1.0, "b", 0.0, "c", 0.0)}},
			want: GateCheck{Result: GateFail, Measured: 3, Missing: []string{"d"}, Bound: "max 0.05", OutOfBounds: []OutOfBoundsNode{{"a", "1"}}},
		},
		"series of nodes not measured are ignored": {
			gate: errors, nodes: []string{"a"}, m: []rolloutanalysis.Measurement{{Gate: "errors", Values: vals("a", 0.0, "z", 9.0)}},
			want: GateCheck{Result: GatePass, Measured: 1, Bound: "max 0.05"},
		},
		"Prometheus not answering is an error, not a pass": {
			gate: errors, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "errors", Err: "cannot reach Prometheus at http://127.0.0.1:1: connection refused"}},
			want: GateCheck{Result: GateError, Error: "cannot reach Prometheus at http://127.0.0.1:1: connection refused"},
		},
		"a gate without a measurement is an error": {
			gate: errors, nodes: nodes, m: nil,
			want: GateCheck{Result: GateError, Error: "not measured"},
		},
		"a baseline gate is judged against the median of the nodes measured": {
			gate: drops, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "drops", Values: vals("a", 1.0, "b", 1.2, "c", 0.9, "d", 2.0)}},
			want: GateCheck{Result: GateFail, Measured: 4, Baseline: BaselineToday, Bound: "max 0.5 of the baseline median 1.1 (4 nodes)", OutOfBounds: []OutOfBoundsNode{{"d", "2"}}},
		},
		"noise every node shares passes a baseline gate": {
			gate: drops, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "drops", Values: vals("a", 10.0, "b", 10.2, "c", 9.9, "d", 10.1)}},
			want: GateCheck{Result: GatePass, Measured: 4, Baseline: BaselineToday, Bound: "max 0.5 of the baseline median 10.05 (4 nodes)"},
		},
		"with too few values a baseline gate is checked for missing series only": {
			gate: drops, nodes: nodes, m: []rolloutanalysis.Measurement{{Gate: "drops", Values: vals("a", 0.0, "b", 100.0)}},
			want: GateCheck{Result: GateMissing, Measured: 2, Missing: []string{"c", "d"}, Baseline: BaselineRollout, Bound: "max 0.5"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			run := gateRun{gates: []rolloutapi.Gate{tc.gate}, req: rolloutanalysis.Request{Wave: tc.nodes, Queries: []rolloutanalysis.GateQuery{{Gate: tc.gate.Name, Wave: "q"}}}}
			got := judgeGates(run, tc.m)
			tc.want.Name, tc.want.Query = tc.gate.Name, "q"
			if len(got) != 1 || !reflect.DeepEqual(got[0], tc.want) {
				t.Errorf("judgeGates =\n%+v\nwant\n%+v", got, tc.want)
			}
			finding := (&AnalysisCheck{Ran: true, Gates: got}).finding()
			if want := tc.want.Result != GatePass; finding != want {
				t.Errorf("finding = %v, want %v for result %s", finding, want, tc.want.Result)
			}
		})
	}
}

// TestAnalysisCheckMeasuresTodaysRevision holds what the check measures: the revision most pods
// run, on every node that runs it, with {{ revision }} and {{ old_revision }} both that revision.
func TestAnalysisCheckMeasuresTodaysRevision(t *testing.T) {
	managed := func(analysis string) *appsv1.DaemonSet {
		return daemonSet(onDelete, func(ds *appsv1.DaemonSet) {
			ds.Annotations = map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged, rolloutapi.AnnotationAnalysis: analysis}
		})
	}
	const gates = `- {name: errors, query: 'x{node=~"{{ nodes }}",revision="{{ revision }}",old="{{ old_revision }}",ds="{{ namespace }}/{{ name }}"}', max: 0.05}`
	today := func(rev string) *PodToday { return &PodToday{Name: "p", Revision: rev, Ready: true} }
	nodes := []NodeImpact{
		{Node: "a.example", Today: today("r1")}, {Node: "b", Today: today("r2")}, {Node: "c", Today: today("r1")}, {Node: "d"},
	}

	c, run := analysisCheck(managed(gates), nodes)
	if c == nil || run == nil {
		t.Fatalf("analysisCheck = %+v, %+v; want a check to run", c, run)
	}
	if c.Revision != "r1" || !reflect.DeepEqual(c.Nodes, []string{"a.example", "c"}) || c.OtherRevisions != 1 {
		t.Errorf("measures revision %q on %v (%d left out), want r1 on [a.example c] (1 left out)", c.Revision, c.Nodes, c.OtherRevisions)
	}
	want := `x{node=~"a\\.example|c",revision="r1",old="r1",ds="default/agent"}`
	if len(run.req.Queries) != 1 || run.req.Queries[0].Wave != want || run.req.Queries[0].Baseline != "" {
		t.Errorf("queries %+v, want one, %s, without a baseline query", run.req.Queries, want)
	}
	if len(c.Gates) != 1 || c.Gates[0].Result != GateNotRun || c.Gates[0].Query != want || c.finding() {
		t.Errorf("before it runs, the check is %+v", c)
	}

	if c, _ := analysisCheck(daemonSet(), nodes); c != nil {
		t.Errorf("an unmanaged DaemonSet has a check: %+v", c)
	}
	if c, run := analysisCheck(managed(gates), []NodeImpact{{Node: "a"}}); c == nil || run != nil || !strings.Contains(c.NotRun, "no pod") || c.finding() {
		t.Errorf("with no pod today the check is %+v (run %v), want not run, saying why", c, run)
	}
	if c, run := analysisCheck(managed(`- {name: errors}`), nodes); c == nil || run != nil || !strings.Contains(c.Error, "query: must not be empty") || !c.finding() {
		t.Errorf("gates that do not parse: check %+v (run %v), want an error that is a finding", c, run)
	}
}
