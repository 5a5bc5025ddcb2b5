package rolloutapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/rego"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// The settings have two definitions that must agree: ParseSettings, the controller's, and the
// rollout_annotations policy, the admission webhook's. The policy is the stricter of the two by
// design (it is where a user meets the error); these tests hold them together:
//
//   - What the policy admits, ParseSettings accepts: the controller never reports InvalidSettings
//     for a DaemonSet that went through the webhook.
//   - What ParseSettings accepts, the policy admits, spelt canonically (FormatSettings), unless
//     one of the policy's documented extra rules (admissionOnly) denies it.

// settingsPolicy evaluates the rollout_annotations policy over a DaemonSet with given annotations.
type settingsPolicy struct {
	violations  rego.PreparedEvalQuery
	minDeadline time.Duration // the policy's minProgressDeadlineSeconds for the default namespace
}

func newSettingsPolicy(t testing.TB) *settingsPolicy {
	t.Helper()
	p := &settingsPolicy{violations: builtinQuery(t, "data.daemonguard.policies.rollout_annotations.violation")}
	minQuery := builtinQuery(t, "data.daemonguard.policies.rollout_annotations.min_progress_deadline")
	rs, err := minQuery.Eval(context.Background(), rego.EvalInput(review(t, &appsv1.DaemonSet{})))
	if err != nil || len(rs) != 1 {
		t.Fatalf("min_progress_deadline: %v %v", rs, err)
	}
	secs, err := strconv.ParseFloat(fmt.Sprint(rs[0].Expressions[0].Value), 64)
	if err != nil {
		t.Fatal(err)
	}
	p.minDeadline = time.Duration(secs * float64(time.Second))
	return p
}

// denials are the policy's messages about annotation key of a DaemonSet annotated key: value;
// none when it admits the value.
func (p *settingsPolicy) denials(t testing.TB, key, value string) []string {
	t.Helper()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", Annotations: map[string]string{key: value}}}
	rs, err := p.violations.Eval(context.Background(), rego.EvalInput(review(t, ds)))
	if err != nil {
		t.Fatalf("evaluate rollout_annotations for %s=%q: %v", key, value, err)
	}
	if len(rs) != 1 {
		t.Fatalf("evaluate rollout_annotations for %s=%q: %d results", key, value, len(rs))
	}
	var out []string
	for _, v := range rs[0].Expressions[0].Value.([]any) {
		m := v.(map[string]any)
		if m["field"] == fmt.Sprintf("metadata.annotations[%q]", key) {
			out = append(out, m["msg"].(string))
		}
	}
	return out
}

// canonical is the value of key as Go reads it, spelt the one way both definitions document:
// decimal numbers without sign or leading zeros, durations as time.Duration.String writes them.
func canonical(t testing.TB, key, value string) string {
	s, err := rolloutapi.ParseSettings(map[string]string{key: value})
	if err != nil {
		t.Fatalf("canonical of %s=%q that does not parse: %v", key, value, err)
	}
	switch key {
	case rolloutapi.AnnotationSteps:
		var parts []string
		for _, st := range s.Steps {
			switch st.Kind {
			case rolloutapi.StepNodes:
				parts = append(parts, strconv.Itoa(st.Value))
			case rolloutapi.StepPercent:
				parts = append(parts, strconv.Itoa(st.Value)+"%")
			case rolloutapi.StepPause:
				parts = append(parts, "pause")
			case rolloutapi.StepTimedPause:
				parts = append(parts, "pause:"+st.Duration.String())
			}
		}
		return strings.Join(parts, ",")
	case rolloutapi.AnnotationMaxUnavailable:
		if s.MaxUnavailable.Type == intstr.String {
			n, _ := strconv.Atoi(strings.TrimSuffix(s.MaxUnavailable.StrVal, "%"))
			return strconv.Itoa(n) + "%"
		}
		return s.MaxUnavailable.String()
	case rolloutapi.AnnotationProgressDeadline:
		return s.ProgressDeadline.String()
	case rolloutapi.AnnotationBake:
		return s.Bake.String()
	case rolloutapi.AnnotationPaused:
		return strconv.FormatBool(s.Paused)
	case rolloutapi.AnnotationOnAnalysisFailure:
		if s.RollbackOnAnalysisFailure {
			return rolloutapi.OnAnalysisFailureRollback
		}
		return rolloutapi.OnAnalysisFailureHalt
	case rolloutapi.AnnotationAnalysis:
		return canonicalGates(t, s.Gates)
	}
	return value
}

// canonicalGates spells gates as JSON (which is YAML), every field written, the interval as
// time.Duration.String writes it.
func canonicalGates(t testing.TB, gates []rolloutapi.Gate) string {
	out := make([]map[string]any, 0, len(gates))
	for _, g := range gates {
		m := map[string]any{
			"name": g.Name, "query": g.Query, "interval": g.Interval.String(), "count": g.Count,
			"nodeLabel": g.NodeLabel, "baseline": g.Baseline,
		}
		if g.Max != nil {
			m["max"] = *g.Max
		}
		if g.Min != nil {
			m["min"] = *g.Min
		}
		out = append(out, m)
	}
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// maxDuration is the policy's bound on durations in annotations (lib.max_duration_ns): a year.
const maxDuration = 8760 * time.Hour

// maxCount is the largest node count the policy admits: nine digits.
const maxCount = 999999999

// admissionOnly names the documented rule, checked only at admission, that denies a value
// ParseSettings accepts; "" when there is none.
func (p *settingsPolicy) admissionOnly(t testing.TB, key, value string) string {
	s, err := rolloutapi.ParseSettings(map[string]string{key: value})
	if err != nil {
		t.Fatalf("admissionOnly of %s=%q that does not parse: %v", key, value, err)
	}
	switch key {
	case rolloutapi.AnnotationSteps:
		if strings.TrimSpace(value) == "" {
			return "an empty list of steps (the controller reads it as 100%)"
		}
		last := map[rolloutapi.StepKind]int{}
		for _, st := range s.Steps {
			switch {
			case st.Kind == rolloutapi.StepTimedPause && st.Duration > maxDuration:
				return "a pause longer than 8760h"
			case st.Kind == rolloutapi.StepNodes && st.Value > maxCount:
				return "a node count of more than nine digits"
			case (st.Kind == rolloutapi.StepNodes || st.Kind == rolloutapi.StepPercent) && st.Value < last[st.Kind]:
				return "count or percent steps that decrease"
			}
			last[st.Kind] = st.Value
		}
	case rolloutapi.AnnotationMaxUnavailable:
		if s.MaxUnavailable.Type == intstr.Int && s.MaxUnavailable.IntValue() > maxCount {
			return "a node count of more than nine digits"
		}
	case rolloutapi.AnnotationProgressDeadline:
		if s.ProgressDeadline < p.minDeadline {
			return "a progress deadline below minProgressDeadlineSeconds"
		}
		if s.ProgressDeadline > maxDuration {
			return "a progress deadline longer than 8760h"
		}
	case rolloutapi.AnnotationResume:
		if value == "" || len(value) > 63 {
			return "an empty resume token or one longer than 63 characters"
		}
	case rolloutapi.AnnotationTopologyKey:
		if len(validation.IsQualifiedName(value)) > 0 {
			return "a topology key that is not a label key"
		}
	case rolloutapi.AnnotationAnalysis:
		if len(s.Gates) == 0 {
			return "an empty list of gates (the controller reads it as none)"
		}
	}
	return ""
}

// agree checks the two directions for one value and returns what each side said.
func (p *settingsPolicy) agree(t testing.TB, key, value string) (goErr error, denials []string) {
	t.Helper()
	_, goErr = rolloutapi.ParseSettings(map[string]string{key: value})
	denials = p.denials(t, key, value)
	if len(denials) == 0 && goErr != nil {
		t.Errorf("%s=%q: the policy admits it, ParseSettings rejects it: %v", key, value, goErr)
	}
	if goErr != nil || len(denials) == 0 {
		return goErr, denials
	}
	if rule := p.admissionOnly(t, key, value); rule != "" {
		return goErr, denials
	}
	if c := canonical(t, key, value); p.denials(t, key, c) != nil {
		t.Errorf("%s=%q: ParseSettings accepts it, and the policy denies even its canonical spelling %q, with no documented rule: %q", key, value, c, denials)
	}
	return goErr, denials
}

// Known values, with what each side says: the spellings the policy denies and the controller
// would read are listed here, so that a change on either side shows.
func TestSettingsPolicyAndParserAgreeOnKnownValues(t *testing.T) {
	p := newSettingsPolicy(t)
	const (
		both   = "both accept"
		none   = "both reject"
		goOnly = "only ParseSettings accepts"
	)
	tests := map[string]struct {
		key, value string
		want       string
	}{
		"the README's canary":                         {rolloutapi.AnnotationSteps, "1,pause:5m,25%,pause,100%", both},
		"spaces around steps":                         {rolloutapi.AnnotationSteps, " 1 , pause:5m ,100% ", both},
		"a pause after the last 100%":                 {rolloutapi.AnnotationSteps, "100%,pause", both},
		"leading zeros":                               {rolloutapi.AnnotationSteps, "007,050%,100%", both},
		"a compound and a fractional pause":           {rolloutapi.AnnotationSteps, "pause:1h30m,pause:1.5h,pause:250ms,pause:1µs,pause:1μs,pause:1us,100%", both},
		"the longest pause":                           {rolloutapi.AnnotationSteps, "pause:8760h,100%", both},
		"the largest count":                           {rolloutapi.AnnotationSteps, "999999999,100%", both},
		"not ending at 100%":                          {rolloutapi.AnnotationSteps, "1,50%", none},
		"only pauses":                                 {rolloutapi.AnnotationSteps, "pause", none},
		"a zero count":                                {rolloutapi.AnnotationSteps, "0,100%", none},
		"a percent over 100":                          {rolloutapi.AnnotationSteps, "101%", none},
		"a zero pause":                                {rolloutapi.AnnotationSteps, "pause:0s,100%", none},
		"a negative pause":                            {rolloutapi.AnnotationSteps, "pause:-5m,100%", none},
		"a pause without unit":                        {rolloutapi.AnnotationSteps, "pause:5,100%", none},
		"days are not a Go unit":                      {rolloutapi.AnnotationSteps, "pause:1d,100%", none},
		"an empty step":                               {rolloutapi.AnnotationSteps, "1,,100%", none},
		"a sub-nanosecond pause":                      {rolloutapi.AnnotationSteps, "pause:0.5ns,100%", none},
		"an empty value":                              {rolloutapi.AnnotationSteps, "", goOnly},
		"decreasing steps":                            {rolloutapi.AnnotationSteps, "50%,25%,100%", goOnly},
		"a signed count":                              {rolloutapi.AnnotationSteps, "+1,100%", goOnly},
		"a ten-digit count":                           {rolloutapi.AnnotationSteps, "1000000000,100%", goOnly},
		"a percent of four digits":                    {rolloutapi.AnnotationSteps, "0100%", goOnly},
		"a pause over a year":                         {rolloutapi.AnnotationSteps, "pause:8761h,100%", goOnly},
		"a signed pause":                              {rolloutapi.AnnotationSteps, "pause:+5m,100%", goOnly},
		"a pause with no digit before the point":      {rolloutapi.AnnotationSteps, "pause:.5s,100%", goOnly},
		"a budget of 2":                               {rolloutapi.AnnotationMaxUnavailable, "2", both},
		"a budget of 25%":                             {rolloutapi.AnnotationMaxUnavailable, "25%", both},
		"a budget of 0":                               {rolloutapi.AnnotationMaxUnavailable, "0", none},
		"a budget of 0%":                              {rolloutapi.AnnotationMaxUnavailable, "0%", none},
		"a fractional budget":                         {rolloutapi.AnnotationMaxUnavailable, "1.5", none},
		"a signed budget":                             {rolloutapi.AnnotationMaxUnavailable, "+2", goOnly},
		"a deadline of 10m":                           {rolloutapi.AnnotationProgressDeadline, "10m", both},
		"a deadline of 1h30m":                         {rolloutapi.AnnotationProgressDeadline, "1h30m", both},
		"a deadline that is not a duration":           {rolloutapi.AnnotationProgressDeadline, "soon", none},
		"a zero deadline":                             {rolloutapi.AnnotationProgressDeadline, "0s", none},
		"a deadline below minProgressDeadlineSeconds": {rolloutapi.AnnotationProgressDeadline, "5s", goOnly},
		"a bake of 10m":                               {rolloutapi.AnnotationBake, "10m", both},
		"the longest bake, 24h":                       {rolloutapi.AnnotationBake, "24h", both},
		"the shortest bake, 1ns":                      {rolloutapi.AnnotationBake, "1ns", both},
		"a bake of 24h and a second":                  {rolloutapi.AnnotationBake, "24h1s", none},
		"a zero bake":                                 {rolloutapi.AnnotationBake, "0s", none},
		"a sub-nanosecond bake":                       {rolloutapi.AnnotationBake, "0.5ns", none},
		"a bake in days":                              {rolloutapi.AnnotationBake, "1d", none},
		"a signed bake":                               {rolloutapi.AnnotationBake, "+5m", goOnly},
		"paused":                                      {rolloutapi.AnnotationPaused, "true", both},
		"paused, misspelt: read as not paused":        {rolloutapi.AnnotationPaused, "yes", goOnly},
		"a resume token":                              {rolloutapi.AnnotationResume, "2026-11-25", both},
		"a topology key":                              {rolloutapi.AnnotationTopologyKey, "topology.kubernetes.io/zone", both},
		"a topology key that is no label key":         {rolloutapi.AnnotationTopologyKey, "not a key", goOnly},
		"halt on analysis failure":                    {rolloutapi.AnnotationOnAnalysisFailure, "halt", both},
		"roll back on analysis failure":               {rolloutapi.AnnotationOnAnalysisFailure, "rollback", both},
		"an empty analysis failure: read as halt":     {rolloutapi.AnnotationOnAnalysisFailure, "", goOnly},
		"an analysis failure action in capitals":      {rolloutapi.AnnotationOnAnalysisFailure, "Rollback", none},
		"an empty list of gates":                      {rolloutapi.AnnotationAnalysis, " ", goOnly},
		"a gate with every field":                     {rolloutapi.AnnotationAnalysis, gateYAML("min: -1, interval: 1m30s, count: 100, nodeLabel: instance, baseline: true"), both},
		"a gate with null fields":                     {rolloutapi.AnnotationAnalysis, gateYAML("min: null, interval: null, count: null, nodeLabel: null, baseline: null"), both},
		"a repeated key keeps its last value":         {rolloutapi.AnnotationAnalysis, gateYAML("count: 0, count: 5"), both},
		"a merge key":                                 {rolloutapi.AnnotationAnalysis, "- &a {name: a, query: '{{ nodes }}', max: 1}\n- {<<: *a, name: b}", both},
		"the bounds of interval and count":            {rolloutapi.AnnotationAnalysis, gateYAML("interval: 1h, count: 1") + "\n" + gateYAML("name: b, interval: 1s"), both},
		"an interval in whole nanoseconds of an hour": {rolloutapi.AnnotationAnalysis, gateYAML("interval: 0.00000000001h1s"), both},
		"a count written as a float":                  {rolloutapi.AnnotationAnalysis, gateYAML("count: 3.0"), both},
		"not YAML":                                    {rolloutapi.AnnotationAnalysis, "[unclosed", none},
		"an infinite bound":                           {rolloutapi.AnnotationAnalysis, gateYAML("max: .inf"), none},
		"not a list":                                  {rolloutapi.AnnotationAnalysis, "name: a", none},
		"an empty YAML list":                          {rolloutapi.AnnotationAnalysis, "[]", none},
		"a gate that is a string":                     {rolloutapi.AnnotationAnalysis, "- a", none},
		"a field name in capitals":                    {rolloutapi.AnnotationAnalysis, gateYAML("Count: 3"), none},
		"a name that is a number":                     {rolloutapi.AnnotationAnalysis, gateYAML("name: 123"), none},
		"a name used twice":                           {rolloutapi.AnnotationAnalysis, gateYAML("") + "\n" + gateYAML(""), none},
		"an unknown placeholder":                      {rolloutapi.AnnotationAnalysis, gateYAML("query: '{{ nodes }}{{ pod }}'"), none},
		"a query without {{ nodes }}":                 {rolloutapi.AnnotationAnalysis, gateYAML("query: '{{ name }}'"), none},
		"no bound":                                    {rolloutapi.AnnotationAnalysis, gateYAML("max: null"), none},
		"min above max":                               {rolloutapi.AnnotationAnalysis, gateYAML("min: 2"), none},
		"an interval of 0s":                           {rolloutapi.AnnotationAnalysis, gateYAML("interval: 0s"), none},
		"an empty interval":                           {rolloutapi.AnnotationAnalysis, gateYAML("interval: ''"), none},
		"an interval over an hour":                    {rolloutapi.AnnotationAnalysis, gateYAML("interval: 61m"), none},
		"an interval a fraction of a ns below 1s":     {rolloutapi.AnnotationAnalysis, gateYAML("interval: 999999999.9ns"), none},
		"a count of 101":                              {rolloutapi.AnnotationAnalysis, gateYAML("count: 101"), none},
		"an empty node label":                         {rolloutapi.AnnotationAnalysis, gateYAML("nodeLabel: ''"), none},
		"a node label that is a boolean":              {rolloutapi.AnnotationAnalysis, gateYAML("nodeLabel: true"), none},
		"baseline yes, a string in YAML 1.2":          {rolloutapi.AnnotationAnalysis, gateYAML("baseline: yes"), none},
		"a signed interval":                           {rolloutapi.AnnotationAnalysis, gateYAML("interval: +5m"), goOnly},
		"an interval with no digit before the point":  {rolloutapi.AnnotationAnalysis, gateYAML("interval: .5h"), goOnly},
		"an interval finer than a nanosecond":         {rolloutapi.AnnotationAnalysis, gateYAML("interval: 1.0000000001s"), goOnly},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			goErr, denials := p.agree(t, tc.key, tc.value)
			got := none
			switch {
			case goErr == nil && len(denials) == 0:
				got = both
			case goErr == nil:
				got = goOnly
			case len(denials) == 0:
				got = "only the policy admits"
			}
			if got != tc.want {
				t.Errorf("%s=%q: %s (ParseSettings: %v; policy: %q), want %s", tc.key, tc.value, got, goErr, denials, tc.want)
			}
		})
	}
}

// gateYAML is a one-gate list in YAML's flow style: a valid gate, name a, max 1, whose fields
// are replaced or extended by fields ("count: 0"; a later key wins).
func gateYAML(fields string) string {
	g := "- {name: a, query: 'x{node=~\"{{ nodes }}\"}', max: 1"
	if fields != "" {
		g += ", " + fields
	}
	return g + "}"
}

// gateTokens are spellings of gate fields, valid and nearly valid, that generated gates combine.
var gateTokens = []string{
	"name: b", "name: a-1", "name: B", "name: -a", "name: 123", "name: ''", "name: null", "Name: c",
	"query: '{{ nodes }}'", "query: 'x{n=~\"{{nodes}}\", r=\"{{ revision }}\", o=\"{{ old_revision }}\"}'",
	"query: '{{ name }}/{{ namespace }}'", "query: '{{ nodes }}{{ pod }}'", "query: '{{ Nodes }}'", "query: ' '", "query: 5",
	"max: 1", "max: 0", "max: -2.5", "max: 1e3", "max: '1'", "max: null", "max: .inf", "max: 0x10",
	"min: 0", "min: 2", "min: -1e-3", "min: null", "min: true",
	"interval: 30s", "interval: 1s", "interval: 999ms", "interval: 1h", "interval: 3600.000000001s", "interval: 1h0m0.5ns",
	"interval: 0.5s500ms", "interval: 1.0000000001s", "interval: 0.01666666667m", "interval: 999999999.9ns",
	"interval: 1000000000ns", "interval: +5m", "interval: .5s", "interval: 5", "interval: ''", "interval: null", "interval: 1d",
	"count: 1", "count: 100", "count: 0", "count: 101", "count: 3.0", "count: 1.5", "count: '3'", "count: -1", "count: null",
	"nodeLabel: instance", "nodeLabel: _n", "nodeLabel: node-name", "nodeLabel: 1n", "nodeLabel: ''", "nodeLabel: true",
	"baseline: true", "baseline: false", "baseline: yes", "baseline: 'true'", "baseline: null", "treshold: 1",
}

// generatedGates are n values of daemonguard.io/analysis from rng: lists of one to three gates,
// each a valid gate with some fields replaced by gateTokens, and some values that are not lists.
func generatedGates(rng *rand.Rand, n int) []string {
	var out []string
	for range n {
		var gates []string
		for range 1 + rng.IntN(3) {
			var fields []string
			for range rng.IntN(4) {
				fields = append(fields, gateTokens[rng.IntN(len(gateTokens))])
			}
			gates = append(gates, gateYAML(strings.Join(fields, ", ")))
		}
		out = append(out, strings.Join(gates, "\n"))
	}
	return append(out, "", "[]", "{}", "null", "- null", "- []", "a", "[unclosed", "- {name: a, query: '{{ nodes }}', max: 1}\n  x: 1")
}

// stepTokens are spellings of one step, valid and nearly valid, that generated values combine.
var stepTokens = []string{
	"1", "2", "3", "10", "007", "999999999", "1000000000", "0", "-1", "+2", "1.5", "x",
	"25%", "50%", "100%", "0%", "101%", "050%", "0100%", "+50%", "%", "1 %",
	"pause", "PAUSE", "pause:", "pause: 5m", "pause:5m", "pause:1h30m", "pause:1.5h", "pause:0s", "pause:-5m",
	"pause:+5m", "pause:.5s", "pause:5.s", "pause:5", "pause:1d", "pause:8760h", "pause:8761h", "pause:0.5ns",
	"pause:0.9ns", "pause:1ns", "pause:0.0009µs", "pause:0.001µs", "pause:250ms", "pause:1µs", "pause:1us",
	"pause:1m1m", "pause:30s0.5ns", "",
}

// generatedSteps are n values of daemonguard.io/steps from rng: lists of stepTokens, most of
// them ending at 100% so that the other rules matter, and mutations of valid lists.
func generatedSteps(rng *rand.Rand, n int) []string {
	const alphabet = "0123456789%,:.pausemhnµ -+"
	var out []string
	for range n {
		var parts []string
		for range 1 + rng.IntN(5) {
			tok := stepTokens[rng.IntN(len(stepTokens))]
			if rng.IntN(5) == 0 {
				tok = " " + tok + " "
			}
			parts = append(parts, tok)
		}
		if rng.IntN(4) != 0 {
			parts = append(parts, "100%")
		}
		v := strings.Join(parts, ",")
		if rng.IntN(4) == 0 { // a typo: one character replaced, inserted or removed
			r := []rune(v)
			i := rng.IntN(len(r) + 1)
			c := []rune(alphabet)[rng.IntN(len([]rune(alphabet)))]
			switch rng.IntN(3) {
			case 0:
				r = slices.Insert(r, i, c)
			case 1:
				if i < len(r) {
					r[i] = c
				}
			default:
				if i < len(r) {
					r = slices.Delete(r, i, i+1)
				}
			}
			v = string(r)
		}
		out = append(out, v)
	}
	return out
}

// Generated values: lists of step spellings and typos of them, budgets and deadlines.
func TestSettingsPolicyAndParserAgreeOnGeneratedValues(t *testing.T) {
	p := newSettingsPolicy(t)
	rng := rand.New(rand.NewPCG(21, 2))
	accepted, denied := 0, 0
	for _, v := range generatedSteps(rng, 3000) {
		goErr, denials := p.agree(t, rolloutapi.AnnotationSteps, v)
		if goErr == nil && len(denials) == 0 {
			accepted++
		}
		if len(denials) > 0 {
			denied++
		}
	}
	// The set must exercise both sides, or the test proves nothing.
	if accepted < 100 || denied < 100 {
		t.Errorf("generated steps: %d admitted by both, %d denied by the policy; want at least 100 of each", accepted, denied)
	}
	numbers := []string{"0", "1", "2", "9", "10", "99", "100", "101", "999999999", "1000000000", "007", "+3", "-1", "1.5", "1e3", ""}
	for _, n := range numbers {
		for _, suffix := range []string{"", "%", " %", "%%"} {
			p.agree(t, rolloutapi.AnnotationMaxUnavailable, n+suffix)
		}
	}
	gatesAdmitted := 0
	for _, v := range generatedGates(rng, 1500) {
		if goErr, denials := p.agree(t, rolloutapi.AnnotationAnalysis, v); goErr == nil && len(denials) == 0 {
			gatesAdmitted++
		}
	}
	if gatesAdmitted < 100 {
		t.Errorf("generated gates: %d admitted by both; want at least 100", gatesAdmitted)
	}
	for _, v := range []string{"", "halt", "rollback", "Halt", "roll back", " halt"} {
		p.agree(t, rolloutapi.AnnotationOnAnalysisFailure, v)
	}
	units := []string{"ns", "us", "µs", "ms", "s", "m", "h", "d", ""}
	for _, n := range append(numbers, "0.5", ".5", "5.", "29.9999", "30", "8760", "8761", "525600") {
		for _, unit := range units {
			p.agree(t, rolloutapi.AnnotationProgressDeadline, n+unit)
			p.agree(t, rolloutapi.AnnotationProgressDeadline, "1h"+n+unit)
			p.agree(t, rolloutapi.AnnotationBake, n+unit)
			p.agree(t, rolloutapi.AnnotationBake, "23h"+n+unit)
		}
	}
}

// FuzzStepsAgree runs the same check on values the fuzzer finds: go test -fuzz FuzzStepsAgree
// ./internal/rolloutapi/. Without -fuzz it runs the seeds.
func FuzzStepsAgree(f *testing.F) {
	p := newSettingsPolicy(f)
	for _, v := range generatedSteps(rand.New(rand.NewPCG(5, 8)), 50) {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		p.agree(t, rolloutapi.AnnotationSteps, v)
	})
}

// FuzzSettingsAgree runs the same check on the other settings the policy parses, with values the
// fuzzer finds: the budget (lib.digits_to_number), the deadline (lib.duration_ns, Rego's reading
// of a Go duration) and the topology key, which the policy must admit exactly when Kubernetes
// takes it for a label key (validation.IsQualifiedName; lib.is_qualified_name is its Rego
// spelling). go test -fuzz FuzzSettingsAgree ./internal/rolloutapi/
func FuzzSettingsAgree(f *testing.F) {
	p := newSettingsPolicy(f)
	// The known values of TestSettingsPolicyAndParserAgreeOnKnownValues and the docs.
	f.Add("10%", "10m", "topology.kubernetes.io/zone")
	f.Add("2", "1h30m", "kubernetes.io/hostname")
	f.Add("25%", "15m", "zone")
	f.Add("0", "soon", "not a key")
	f.Add("0%", "0s", "example.com/")
	f.Add("1.5", "5s", "-zone")
	f.Add("+2", "8760h", "a/b/c")
	f.Add("999999999", "8761h", "Example.COM/zone")
	f.Add("1000000000", "29.9999s", "")
	f.Add("007%", "1h0.5ns", "x.example.com/"+strings.Repeat("k", 63))
	f.Fuzz(func(t *testing.T, budget, deadline, topologyKey string) {
		// Annotations reach the policy as JSON, which holds valid UTF-8 only.
		if !utf8.ValidString(budget) || !utf8.ValidString(deadline) || !utf8.ValidString(topologyKey) {
			return
		}
		p.agree(t, rolloutapi.AnnotationMaxUnavailable, budget)
		p.agree(t, rolloutapi.AnnotationProgressDeadline, deadline)
		p.agree(t, rolloutapi.AnnotationBake, deadline)
		_, denials := p.agree(t, rolloutapi.AnnotationTopologyKey, topologyKey)
		if errs := validation.IsQualifiedName(topologyKey); (len(denials) == 0) != (len(errs) == 0) {
			t.Errorf("topology key %q: the policy says %q, Kubernetes says %q", topologyKey, denials, errs)
		}
	})
}
