package preflight

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/policy"
)

func TestForecastLinesListsPausesInTheOrderTheyHappen(t *testing.T) {
	tests := map[string]struct {
		forecast rolloutplan.Timeline
		want     []string
	}{
		"a timed pause reached as soon as the canary is Ready follows the canary": {
			forecast: rolloutplan.Timeline{
				Waves: []rolloutplan.Wave{
					{At: 0, Step: "1/4: 1", StepIndex: 0, Nodes: []string{"worker-0"}},
					{At: 5 * time.Minute, Step: "3/4: 50%", StepIndex: 2, Nodes: []string{"worker-1"}},
				},
				Pauses: []rolloutplan.PauseStep{{At: 0, Step: "2/4: pause:5m", StepIndex: 1, Duration: 5 * time.Minute}},
			},
			want: []string{
				"  at 0s, step 1/4: 1: worker-0",
				"  at 0s, step 2/4: pause:5m: pauses 5m0s",
				"  at 5m0s, step 3/4: 50%: worker-1",
			},
		},
		"a manual pause resumed at once precedes the wave of the next step": {
			forecast: rolloutplan.Timeline{
				Waves:  []rolloutplan.Wave{{At: 0, Step: "2/2: 100%", StepIndex: 1, Nodes: []string{"worker-0"}}},
				Pauses: []rolloutplan.PauseStep{{At: 0, Step: "1/2: pause", StepIndex: 0, Manual: true}},
			},
			want: []string{
				"  at 0s, step 1/2: pause: waits for `daemonguard rollout resume` (counted as no time)",
				"  at 0s, step 2/2: 100%: worker-0",
			},
		},
		"a pause after the last wave comes last": {
			forecast: rolloutplan.Timeline{
				Waves:  []rolloutplan.Wave{{At: 0, Step: "1/2: 1", StepIndex: 0, Nodes: []string{"worker-0"}}},
				Pauses: []rolloutplan.PauseStep{{At: time.Minute, Step: "2/2: pause", StepIndex: 1, Manual: true}},
			},
			want: []string{
				"  at 0s, step 1/2: 1: worker-0",
				"  at 1m0s, step 2/2: pause: waits for `daemonguard rollout resume` (counted as no time)",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := forecastLines(&tc.forecast); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("forecastLines =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestGateLinesListEveryGateWithItsCadence(t *testing.T) {
	got := gateLines([]rolloutplan.GateSummary{
		{Name: "errors", Query: `sum by (node) (x{node=~"{{ nodes }}"})`, Interval: 30 * time.Second, Count: 3},
		{Name: "drops", Query: `y{node=~"{{ nodes }}"}`, Interval: time.Minute, Count: 1, Baseline: true},
	})
	want := []string{
		"analysis after each wave (the estimate assumes every measurement passes):",
		`  gate errors: 3 measurements 30s apart: sum by (node) (x{node=~"{{ nodes }}"})`,
		`  gate drops: 1 measurements 1m0s apart, against a baseline of other nodes: y{node=~"{{ nodes }}"}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gateLines =\n%q\nwant\n%q", got, want)
	}
	if lines := gateLines(nil); lines != nil {
		t.Errorf("no gates listed as %q", lines)
	}
}

func TestRenderPlans(t *testing.T) {
	plan := &Impact{
		Namespace: "default", Name: "agent", Operation: "update", NewRevision: true,
		TemplateChanges: []string{"spec.template.spec.containers[0].image"},
		Nodes: []NodeImpact{
			{Node: "w1", Today: &PodToday{Name: "agent-1", Revision: "r1", Ready: true}, Change: Replaced, Reason: "new revision",
				Fit: &FitResult{Schedulable: true, Insufficient: []string{"cpu: asks 2, 1 free of 4"}, Preempts: []Victim{{Namespace: "x", Name: "low|pod", Priority: 0}}}},
			{Node: "w2", Today: &PodToday{Name: "agent-2", Revision: "r1", Ready: true}, Change: Unchanged},
		},
		Summary: Summary{Nodes: 2, Replaced: 1, Unchanged: 1, Preempting: 1},
		Rollout: Rollout{Strategy: "managed", Summary: "daemonguard replaces 1 nodes", Estimate: time.Minute, Managed: &rolloutplan.Timeline{
			Order:  "by name",
			Waves:  []rolloutplan.Wave{{At: 0, Step: "1/3: 1", StepIndex: 0, Nodes: []string{"w1"}}, {At: 2 * time.Minute, Step: "3/3: 100%", StepIndex: 2, Nodes: []string{"w2"}}},
			Pauses: []rolloutplan.PauseStep{{At: time.Minute, Step: "2/3: pause:1m", StepIndex: 1, Duration: time.Minute}},
		}},
	}
	plan.Analysis = &AnalysisCheck{Ran: true, Revision: "r1", Nodes: []string{"w1", "w2", "w3", "w4", "w5"}, OtherRevisions: 1, Prometheus: "http://prom:9090", Gates: []GateCheck{
		{Name: "errors", Result: GateFail, Measured: 5, Bound: "max 0.05", OutOfBounds: []OutOfBoundsNode{{"w1", "0.123456"}, {"w2", "+Inf"}, {"w3", "1"}, {"w4", "2"}}},
		{Name: "drops", Result: GateMissing, Measured: 4, Missing: []string{"w5"}, Baseline: BaselineToday, Bound: "max 1 of the baseline median 2 (4 nodes)"},
		{Name: "few", Result: GateMissing, Measured: 1, Missing: []string{"w2", "w3", "w4", "w5"}, Baseline: BaselineRollout, Bound: "max 1"},
		{Name: "slow", Result: GateError, Error: "Prometheus at http://prom:9090 did not answer within 10s (--prometheus-timeout)"},
		{Name: "fine", Result: GatePass, Measured: 5, Bound: "max 1"},
	}}
	reports := []Report{{Source: "ds.yaml#1", Namespace: "default", Name: "agent", Plan: plan,
		Admission: AdmissionReport{Injection: "webhook", Validation: "webhook", Mutated: true, Allowed: true, Policies: "built-in policies",
			Violations: []policy.Violation{{Policy: "budget", Action: policy.Warn, Message: "wide"}}}}}

	var table bytes.Buffer
	if err := Render(&table, "table", reports); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	for _, want := range []string{"injection webhook (injects)", "policies: built-in policies", "WARN", "w1", "does not fit: cpu", "preempts x/low|pod (priority 0)", "estimate: 1m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{
		"  analysis check: each gate's query run once against revision r1 on the 5 nodes that run it (Prometheus http://prom:9090); 1 node running another revision left out:\n",
		"    gate errors: WOULD FAIL: 4 of 5 nodes out of bounds already (max 0.05): w1=0.1235, w2=+Inf, w3=1 and 1 more\n",
		"    gate drops: NO SERIES for 1 of 5 nodes: w5; the rollout would pause (inconclusive) until they have one; the other 4 within bounds (max 1 of the baseline median 2 (4 nodes), the nodes measured today as the baseline)\n",
		"    gate few: NO SERIES for 4 of 5 nodes: w2, w3, w4 and 1 more; the rollout would pause (inconclusive) until they have one; a baseline gate: with 1 of 5 nodes measured there is no median to judge them by; the rollout judges it against old-revision nodes, and only missing series are checked here\n",
		"    gate slow: NO ANSWER from Prometheus: Prometheus at http://prom:9090 did not answer within 10s (--prometheus-timeout); the rollout would pause (inconclusive) until it answers\n",
		"    gate fine: passes: 5 of 5 nodes within bounds (max 1)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "w2 ") {
		t.Errorf("the table lists an unchanged node:\n%s", out)
	}
	wave, pause, last := strings.Index(out, "step 1/3"), strings.Index(out, "pauses 1m0s"), strings.Index(out, "step 3/3")
	if wave < 0 || pause < wave || last < pause {
		t.Errorf("waves and pauses are not in time order:\n%s", out)
	}

	var md bytes.Buffer
	if err := Render(&md, "markdown", reports); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| w1 |") || !strings.Contains(md.String(), `low\|pod`) {
		t.Errorf("markdown lacks the node row or does not escape a pipe:\n%s", md.String())
	}
	if !strings.Contains(md.String(), "\n\nanalysis check: each gate's query") || !strings.Contains(md.String(), "\n- gate errors: WOULD FAIL: 4 of 5 nodes") {
		t.Errorf("markdown lacks the analysis check as a list of gates:\n%s", md.String())
	}

	var js bytes.Buffer
	if err := Render(&js, "json", reports); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Items    []Report `json:"items"`
		ExitCode int      `json:"exitCode"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded.ExitCode != exitPlanNotFit || len(decoded.Items) != 1 || len(decoded.Items[0].Plan.Nodes) != 2 {
		t.Errorf("json = %s", js.String())
	}
	if got := decoded.Items[0].Plan.Analysis; got == nil || !reflect.DeepEqual(*got, *plan.Analysis) {
		t.Errorf("the analysis check does not survive JSON: %+v", got)
	}
}

// fleetPlans is a fleet of four clusters: canary replaces every pod and its gates pass, prod-eu
// would deny, prod|us (a pipe in its name) has a gate that already fails and a pod that does not
// fit, and dead could not be planned.
func fleetPlans() []ClusterPlan {
	planned := func(s Summary, gates ...GateCheck) Report {
		return Report{Namespace: "agents", Name: "agent", Admission: AdmissionReport{Allowed: true, Violations: []policy.Violation{}},
			Plan: &Impact{Operation: "update", NewRevision: true, Summary: s, Rollout: Rollout{Summary: "daemonguard replaces 4 nodes"},
				Analysis: &AnalysisCheck{Ran: true, Revision: "r1", Gates: gates}}}
	}
	canary := planned(Summary{Nodes: 4, Replaced: 4}, GateCheck{Name: "errors", Result: GatePass})
	denied := Report{Namespace: "agents", Name: "agent", Admission: AdmissionReport{Validation: "webhook", Violations: []policy.Violation{
		{Policy: "budget", Action: policy.Deny, Message: "maxUnavailable 50% is above 25%"},
		{Policy: "budget", Action: policy.Deny, Message: "again"},
		{Policy: "images", Action: policy.Warn, Message: "latest tag"},
	}}}
	failing := planned(Summary{Nodes: 3, Gains: 1, Loses: 1, Replaced: 1, NotFit: 1}, GateCheck{Name: "errors", Result: GateFail}, GateCheck{Name: "drops", Result: GateMissing}, GateCheck{Name: "ok", Result: GatePass})
	return []ClusterPlan{
		{Context: "canary", Items: []Report{canary}, ExitCode: ExitStatus([]Report{canary})},
		{Context: "prod-eu", Items: []Report{denied}, ExitCode: ExitStatus([]Report{denied})},
		{Context: "prod|us", Items: []Report{failing}, ExitCode: ExitStatus([]Report{failing})},
		{Context: "dead", Items: []Report{}, Error: "list nodes: Get \"https://127.0.0.1:1/api/v1/nodes\": dial tcp 127.0.0.1:1: connect: connection refused\nretrying | not", ExitCode: 1},
	}
}

func TestRenderFleet(t *testing.T) {
	plans := fleetPlans()
	tests := map[string]struct {
		format string
		want   []string // lines of the output, in order, each whole
		absent []string // text the output must not hold
	}{
		"the table: one row per cluster and DaemonSet, then the plans with a finding": {
			format: "table",
			want: []string{
				"CONTEXT  DAEMONSET     GAIN  LOSE  REPLACE  NOT FIT  PREEMPTS  DENIED BY  GATES FAILING TODAY                     EXIT  NOTE",
				"canary   agents/agent  0     0     4        0        0         -          none                                    0     new revision",
				"prod-eu  agents/agent  -     -     -        -        -         budget     -                                       2     WOULD BE DENIED: nothing is applied",
				"prod|us  agents/agent  1     1     1        1        0         -          errors (would fail), drops (no series)  3     new revision",
				`dead     -             -     -     -        -        -         -          -                                       1     ERROR: list nodes: Get "https://127.0.0.1:1/api/v1/nodes": dial tcp 127.0.0.1:1: connect: connection refused retrying | not`,
				"=== context prod-eu: exit 2",
				"DaemonSet agents/agent ()",
				"  WOULD BE DENIED: nothing is applied",
				"=== context prod|us: exit 3",
			},
			absent: []string{"=== context canary", "=== context dead"},
		},
		"markdown: cells escaped, the plans with a finding folded": {
			format: "markdown",
			want: []string{
				"### daemonguard rollout plan over 4 clusters",
				"| context | daemonset | gain | lose | replace | not fit | preempts | denied by | gates failing today | exit | note |",
				"|---|---|---|---|---|---|---|---|---|---|---|",
				"| canary | agents/agent | 0 | 0 | 4 | 0 | 0 | - | none | 0 | new revision |",
				"| prod-eu | agents/agent | - | - | - | - | - | budget | - | 2 | WOULD BE DENIED: nothing is applied |",
				`| prod\|us | agents/agent | 1 | 1 | 1 | 1 | 0 | - | errors (would fail), drops (no series) | 3 | new revision |`,
				`| dead | - | - | - | - | - | - | - | - | 1 | ERROR: list nodes: Get "https://127.0.0.1:1/api/v1/nodes": dial tcp 127.0.0.1:1: connect: connection refused retrying \| not |`,
				"<details><summary>prod-eu: exit 2</summary>",
				"#### DaemonSet `agents/agent`",
				"</details>",
				"<details><summary>prod|us: exit 3</summary>",
			},
			absent: []string{"<summary>canary", "<summary>dead"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := RenderFleet(&buf, tc.format, plans); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			lines := strings.Split(out, "\n")
			at := 0
			for _, want := range tc.want {
				i := slices.Index(lines[at:], want)
				if i < 0 {
					t.Fatalf("no line %q after line %d in:\n%s", want, at, out)
				}
				at += i + 1
			}
			for _, a := range tc.absent {
				if strings.Contains(out, a) {
					t.Errorf("holds %q:\n%s", a, out)
				}
			}
		})
	}

	var js bytes.Buffer
	if err := RenderFleet(&js, "json", plans); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Clusters []ClusterPlan `json:"clusters"`
		ExitCode int           `json:"exitCode"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.ExitCode != 1 || !reflect.DeepEqual(doc.Clusters, plans) {
		t.Errorf("json does not carry the fleet whole:\n%s", js.String())
	}
}

// The markdown of a cluster alone is unchanged by the fleet: a fleet's folded section of a
// cluster is that cluster's plan below its heading.
func TestFleetMarkdownFoldsTheClustersOwnPlan(t *testing.T) {
	plans := fleetPlans()
	var one, fleet bytes.Buffer
	if err := Render(&one, "markdown", plans[2].Items); err != nil {
		t.Fatal(err)
	}
	if err := RenderFleet(&fleet, "markdown", plans); err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(one.String(), "### daemonguard rollout plan\n")
	if !strings.Contains(fleet.String(), "<details><summary>prod|us: exit 3</summary>\n"+body+"\n</details>\n") {
		t.Errorf("the fleet's section of prod|us is not its plan:\n%s\n---\n%s", fleet.String(), one.String())
	}
}

// A pull-request comment folds in the plans of markdownFleetPlans clusters with a finding at
// most, and counts the rest; every cluster keeps its summary row.
func TestFleetMarkdownBoundsTheFoldedPlans(t *testing.T) {
	denied := fleetPlans()[1]
	var plans []ClusterPlan
	for i := range markdownFleetPlans + 2 {
		p := denied
		p.Context = fmt.Sprintf("c%02d", i)
		plans = append(plans, p)
	}
	var buf bytes.Buffer
	if err := RenderFleet(&buf, "markdown", plans); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	rows, folded := strings.Count(out, " | agents/agent | "), strings.Count(out, "<details><summary>c")
	if rows != markdownFleetPlans+2 || folded != markdownFleetPlans || !strings.HasSuffix(out, "\n… and the plans of 2 more clusters with a finding (`-o json` has every cluster's plan).\n") {
		t.Errorf("%d rows, %d plans folded in:\n%s", rows, folded, out)
	}
}
