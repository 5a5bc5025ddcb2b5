package rolloutapi_test

import (
	"context"
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
	case rolloutapi.AnnotationPaused:
		return strconv.FormatBool(s.Paused)
	}
	return value
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
		"paused":                                      {rolloutapi.AnnotationPaused, "true", both},
		"paused, misspelt: read as not paused":        {rolloutapi.AnnotationPaused, "yes", goOnly},
		"a resume token":                              {rolloutapi.AnnotationResume, "2026-11-25", both},
		"a topology key":                              {rolloutapi.AnnotationTopologyKey, "topology.kubernetes.io/zone", both},
		"a topology key that is no label key":         {rolloutapi.AnnotationTopologyKey, "not a key", goOnly},
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
	units := []string{"ns", "us", "µs", "ms", "s", "m", "h", "d", ""}
	for _, n := range append(numbers, "0.5", ".5", "5.", "29.9999", "30", "8760", "8761", "525600") {
		for _, unit := range units {
			p.agree(t, rolloutapi.AnnotationProgressDeadline, n+unit)
			p.agree(t, rolloutapi.AnnotationProgressDeadline, "1h"+n+unit)
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
		_, denials := p.agree(t, rolloutapi.AnnotationTopologyKey, topologyKey)
		if errs := validation.IsQualifiedName(topologyKey); (len(denials) == 0) != (len(errs) == 0) {
			t.Errorf("topology key %q: the policy says %q, Kubernetes says %q", topologyKey, denials, errs)
		}
	})
}
