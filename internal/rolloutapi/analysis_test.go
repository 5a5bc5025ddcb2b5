package rolloutapi

import (
	"reflect"
	"testing"
	"time"
)

func TestParseGates(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	const query = `sum by (node) (rate(errors_total{node=~"{{ nodes }}"}[5m]))`
	defaults := Gate{Name: "errors", Query: query, Max: f(0.1), Interval: DefaultGateInterval, Count: DefaultGateCount, NodeLabel: DefaultGateNodeLabel}
	tests := map[string]struct {
		in      string
		want    []Gate
		wantErr string
	}{
		"an empty value is no gates":                              {in: " \n"},
		"a gate with only the required fields takes the defaults": {in: `[{name: errors, query: '` + query + `', max: 0.1}]`, want: []Gate{defaults}},
		"every field": {
			in: `- name: latency
  query: 'x{instance=~"{{nodes}}", rev="{{ revision }}"}'
  min: -1
  max: 2
  interval: 1m30s
  count: 100
  nodeLabel: instance
  baseline: true`,
			want: []Gate{{Name: "latency", Query: `x{instance=~"{{nodes}}", rev="{{ revision }}"}`, Min: f(-1), Max: f(2), Interval: 90 * time.Second, Count: 100, NodeLabel: "instance", Baseline: true}},
		},
		"a null field is left out":            {in: `[{name: errors, query: '` + query + `', max: 0.1, min: null, interval: null, count: null, nodeLabel: null, baseline: null}]`, want: []Gate{defaults}},
		"a repeated key keeps its last value": {in: `[{name: x, name: errors, query: '` + query + `', max: 0.1}]`, want: []Gate{defaults}},
		"the bounds of interval and count":    {in: `[{name: a, query: '{{ nodes }}', max: 1, interval: 1s, count: 1}, {name: b, query: '{{ nodes }}', max: 1, interval: 1h}]`, want: []Gate{{Name: "a", Query: "{{ nodes }}", Max: f(1), Interval: time.Second, Count: 1, NodeLabel: "node"}, {Name: "b", Query: "{{ nodes }}", Max: f(1), Interval: time.Hour, Count: DefaultGateCount, NodeLabel: "node"}}},
		"not YAML":                            {in: "[unclosed", wantErr: "want a YAML list of gates"},
		"an infinite bound is not JSON":       {in: "[{name: a, query: '{{ nodes }}', max: .inf}]", wantErr: "want a YAML list of gates"},
		"not a list":                          {in: "name: errors", wantErr: "want a YAML list of gates"},
		"an empty list":                       {in: "[]", wantErr: "at least one gate"},
		"a comment only":                      {in: "# none", wantErr: "at least one gate"},
		"a gate that is not an object":        {in: `["errors"]`, wantErr: "gate 1: want an object"},
		"a null gate":                         {in: `[null]`, wantErr: "gate 1: want an object"},
		"an unknown field":                    {in: `[{name: a, query: '{{ nodes }}', max: 1, treshold: 1}]`, wantErr: `unknown field "treshold"`},
		"field names are case-sensitive":      {in: `[{Name: a, query: '{{ nodes }}', max: 1}]`, wantErr: `unknown field "Name"`},
		"a name that is no DNS label":         {in: `[{name: Errors, query: '{{ nodes }}', max: 1}]`, wantErr: `name "Errors"`},
		"a number is not a name":              {in: `[{name: 123, query: '{{ nodes }}', max: 1}]`, wantErr: "gate 1: json: cannot unmarshal number"},
		"a name used twice":                   {in: `[{name: a, query: '{{ nodes }}', max: 1}, {name: a, query: '{{ nodes }}', min: 1}]`, wantErr: `gate 2: name "a" is used twice`},
		"an empty query":                      {in: `[{name: a, query: ' ', max: 1}]`, wantErr: "query: must not be empty"},
		"an unknown placeholder":              {in: `[{name: a, query: '{{ nodes }}{{ pod }}', max: 1}]`, wantErr: "unknown placeholder {{ pod }}"},
		"a query without {{ nodes }}":         {in: `[{name: a, query: '{{ name }}', max: 1}]`, wantErr: "must select the wave's nodes"},
		"neither max nor min":                 {in: `[{name: a, query: '{{ nodes }}'}]`, wantErr: "set max, min or both"},
		"min above max":                       {in: `[{name: a, query: '{{ nodes }}', min: 2, max: 1}]`, wantErr: "min 2 is above max 1"},
		"a bound that is a string":            {in: `[{name: a, query: '{{ nodes }}', max: '1'}]`, wantErr: "cannot unmarshal string"},
		"an interval below 1s":                {in: `[{name: a, query: '{{ nodes }}', max: 1, interval: 999ms}]`, wantErr: `interval "999ms": must be a Go duration from 1s to 1h0m0s`},
		"an interval above 1h":                {in: `[{name: a, query: '{{ nodes }}', max: 1, interval: 1h0.001s}]`, wantErr: `interval "1h0.001s"`},
		"an empty interval":                   {in: `[{name: a, query: '{{ nodes }}', max: 1, interval: ''}]`, wantErr: `interval ""`},
		"an interval without unit":            {in: `[{name: a, query: '{{ nodes }}', max: 1, interval: 30}]`, wantErr: "cannot unmarshal number"},
		"a count of 0":                        {in: `[{name: a, query: '{{ nodes }}', max: 1, count: 0}]`, wantErr: "count 0: must be from 1 to 100"},
		"a count over 100":                    {in: `[{name: a, query: '{{ nodes }}', max: 1, count: 101}]`, wantErr: "count 101"},
		"a fractional count":                  {in: `[{name: a, query: '{{ nodes }}', max: 1, count: 1.5}]`, wantErr: "cannot unmarshal number 1.5"},
		"a node label that is no label name":  {in: `[{name: a, query: '{{ nodes }}', max: 1, nodeLabel: node-name}]`, wantErr: `nodeLabel "node-name"`},
		"an empty node label":                 {in: `[{name: a, query: '{{ nodes }}', max: 1, nodeLabel: ''}]`, wantErr: `nodeLabel ""`},
		"a boolean is not a node label":       {in: `[{name: a, query: '{{ nodes }}', max: 1, nodeLabel: true}]`, wantErr: "cannot unmarshal bool"},
		"yes is a string, not a boolean":      {in: `[{name: a, query: '{{ nodes }}', max: 1, baseline: yes}]`, wantErr: "cannot unmarshal string"},
		"the first bad gate is named":         {in: `[{name: a, query: '{{ nodes }}', max: 1}, {name: b, query: '{{ nodes }}', max: 1, count: 0}]`, wantErr: "gate 2: count 0"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseGates(tc.in)
			if expectError(t, err, tc.wantErr) {
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("ParseGates(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseOnAnalysisFailure(t *testing.T) {
	tests := map[string]struct {
		in           string
		wantRollback bool
		wantErr      string
	}{
		"absent halts":          {in: ""},
		"halt halts":            {in: "halt"},
		"rollback rolls back":   {in: "rollback", wantRollback: true},
		"values are lower-case": {in: "Rollback", wantErr: `"Rollback": must be "halt" or "rollback"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseOnAnalysisFailure(tc.in)
			if expectError(t, err, tc.wantErr) {
				return
			}
			if err != nil || got != tc.wantRollback {
				t.Errorf("ParseOnAnalysisFailure(%q) = %v, %v; want %v", tc.in, got, err, tc.wantRollback)
			}
		})
	}
}

func TestRenderQuery(t *testing.T) {
	vars := QueryVars{Nodes: []string{"node-1", "ip-10-0-0-1.ec2.internal"}, Revision: "7d9f8c", OldRevision: "5b6c4d", Name: "agent", Namespace: "kube-system"}
	tests := map[string]struct {
		query string
		vars  QueryVars
		want  string
	}{
		"node names are joined by | with their dots escaped for PromQL": {
			query: `up{node=~"{{ nodes }}"}`, vars: vars, want: `up{node=~"node-1|ip-10-0-0-1\\.ec2\\.internal"}`,
		},
		"every placeholder expands": {
			query: `x{n=~"{{ nodes }}", r="{{ revision }}", o="{{ old_revision }}", d="{{ namespace }}/{{ name }}"}`, vars: vars,
			want: `x{n=~"node-1|ip-10-0-0-1\\.ec2\\.internal", r="7d9f8c", o="5b6c4d", d="kube-system/agent"}`,
		},
		"whitespace inside the braces is optional": {query: "{{nodes}} {{  name\t}}", vars: vars, want: `node-1|ip-10-0-0-1\\.ec2\\.internal agent`},
		"no old revision expands to nothing":       {query: `r="{{ old_revision }}"`, vars: QueryVars{}, want: `r=""`},
		"a placeholder may repeat":                 {query: "{{ name }}-{{ name }}", vars: vars, want: "agent-agent"},
		"what is not a placeholder stays":          {query: "{{ a-b }} { name } {{ nodes", vars: vars, want: "{{ a-b }} { name } {{ nodes"},
		"one node needs no |":                      {query: "{{ nodes }}", vars: QueryVars{Nodes: []string{"a.b"}}, want: `a\\.b`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := RenderQuery(tc.query, tc.vars); got != tc.want {
				t.Errorf("RenderQuery(%q) = %q, want %q", tc.query, got, tc.want)
			}
		})
	}
}

// The annotation keeps a gate's times to the millisecond, so that its next measurement is due when
// its interval has passed, neither a second early nor a second late; the verification time to
// the second, as the pods' Ready times; and a round trip is stable.
func TestAnalysisStatusKeepsMilliseconds(t *testing.T) {
	at := time.Date(2026, 11, 27, 10, 0, 5, 0, time.UTC)
	a := &AnalysisStatus{VerifiedAt: at.Add(300*time.Millisecond + 17*time.Microsecond), Wave: 3, Gates: []GateStatus{
		{Name: "late", Next: at.Add(200 * time.Millisecond), Last: &GateMeasurement{At: at.Add(900 * time.Millisecond), Result: MeasurementPassed}},
		{Name: "whole", Next: at},
	}}
	got, err := decodeAnalysis(encodeAnalysis(a))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Gates[0].Next.Equal(at.Add(200*time.Millisecond)) || !got.Gates[1].Next.Equal(at) {
		t.Errorf("next measurements %s and %s, want %s and %s", got.Gates[0].Next, got.Gates[1].Next, at.Add(200*time.Millisecond), at)
	}
	if !got.Gates[0].Last.At.Equal(at.Add(900 * time.Millisecond)) {
		t.Errorf("measured at %s, want %s: to the millisecond", got.Gates[0].Last.At, at.Add(900*time.Millisecond))
	}
	// Pods' Ready times are to the second: one Ready at 10:00:05.7 shows 10:00:05, and must
	// belong to the wave after a verification at 10:00:05.3.
	if !got.VerifiedAt.Equal(at) {
		t.Errorf("verified at %s, want %s: to the second, as pods' Ready times", got.VerifiedAt, at)
	}
	if again, _ := decodeAnalysis(encodeAnalysis(got)); !reflect.DeepEqual(again, got) {
		t.Errorf("a second round trip changed %+v to %+v", got, again)
	}
}
