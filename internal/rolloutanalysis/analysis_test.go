package rolloutanalysis

import (
	"math"
	"reflect"
	"testing"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// TestJudge holds the node-by-node judgement that both the rollout and `rollout plan` use:
// bounds are inclusive, NaN is no value, a node without a value is neither in nor out of
// bounds, and a baseline gate bounds the difference from the baseline median.
func TestJudge(t *testing.T) {
	bound := func(v float64) *float64 { return &v }
	plain := rolloutapi.Gate{Name: "errors", Max: bound(0.1), NodeLabel: "node"}
	both := rolloutapi.Gate{Name: "rate", Min: bound(1), Max: bound(5), NodeLabel: "node"}
	noise := rolloutapi.Gate{Name: "drops", Max: bound(0.5), NodeLabel: "node", Baseline: true}
	tests := map[string]struct {
		gate            rolloutapi.Gate
		m               Measurement
		nodes, baseline []string
		want            Judgement
	}{
		"a value at the bound is in bounds": {
			gate: plain, m: Measurement{Values: map[string]float64{"a": 0.1, "b": 0.2}}, nodes: []string{"a", "b"},
			want: Judgement{Measured: 2, OutOfBounds: []NodeValue{{"b", 0.2}}, Bound: "max 0.1"},
		},
		"missing and NaN nodes are missing, and the others still judged": {
			gate: plain, m: Measurement{Values: map[string]float64{"a": math.NaN(), "c": 3.0}}, nodes: []string{"a", "b", "c"},
			want: Judgement{Measured: 1, Missing: []string{"a", "b"}, OutOfBounds: []NodeValue{{"c", 3}}, Bound: "max 0.1"},
		},
		"min and max": {
			gate: both, m: Measurement{Values: map[string]float64{"a": 0.5, "b": 1.0, "c": 6.0}}, nodes: []string{"a", "b", "c"},
			want: Judgement{Measured: 3, OutOfBounds: []NodeValue{{"a", 0.5}, {"c", 6}}, Bound: "min 1, max 5"},
		},
		"a baseline gate bounds the difference from the baseline median": {
			gate: noise, m: Measurement{Values: map[string]float64{"a": 1.4, "b": 1.6}, Baseline: map[string]float64{"x": 1.0, "y": 0.8, "z": 5.0}},
			nodes: []string{"a", "b"}, baseline: []string{"x", "y", "z"},
			want: Judgement{Measured: 2, Baseline: 1, BaselineNodes: 3, OutOfBounds: []NodeValue{{"b", 1.6}}, Bound: "max 0.5 of the baseline median 1 (3 nodes)"},
		},
		"without a baseline value nothing is out of bounds": {
			gate: noise, m: Measurement{Values: map[string]float64{"a": 9.0}}, nodes: []string{"a"}, baseline: []string{"x"},
			want: Judgement{Measured: 1, Bound: "max 0.5"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Judge(tc.gate, tc.m, tc.nodes, tc.baseline); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Judge =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}
