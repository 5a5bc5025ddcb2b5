package audit

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/policy"
)

var testPolicies = map[string]policy.Action{
	"on_delete_managed":     policy.Warn,
	"revision_history":      policy.Deny,
	"rolling_update_budget": policy.Deny,
	"rollout_annotations":   policy.DryRun,
}

func violation(name string, action policy.Action, msg string) policy.Violation {
	return policy.Violation{Policy: name, Field: "spec.x", Message: msg, Action: action}
}

// describe renders a report's results one line each: "ds policy result severity message".
func describeReport(r openreports.Report) []string {
	var out []string
	for _, res := range r.Results {
		if len(res.Subjects) != 1 || res.Subjects[0].Kind != "DaemonSet" || res.Subjects[0].APIVersion != "apps/v1" || res.Subjects[0].Namespace != r.Namespace {
			out = append(out, fmt.Sprintf("bad subjects %+v", res.Subjects))
			continue
		}
		if res.Source != ReportSource {
			out = append(out, "bad source "+res.Source)
		}
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %s %s", res.Subjects[0].Name, res.Policy, res.Result, res.Severity, res.Description)))
	}
	return out
}

func TestReports(t *testing.T) {
	now := time.Date(2026, 11, 25, 8, 0, 0, 0, time.UTC)
	passes := func(ds string, except ...string) []string {
		var out []string
		for _, p := range []string{"inject", "on_delete_managed", "revision_history", "rolling_update_budget", "rollout_annotations"} {
			if !slices.Contains(except, p) {
				out = append(out, fmt.Sprintf("%s %s pass %s", ds, p, map[string]string{"inject": "", "on_delete_managed": "medium", "revision_history": "high", "rolling_update_budget": "high", "rollout_annotations": "low"}[p]))
			}
		}
		for i := range out {
			out[i] = strings.TrimSpace(out[i])
		}
		return out
	}
	sorted := func(lines ...[]string) []string {
		all := slices.Concat(lines...)
		slices.SortStableFunc(all, func(a, b string) int {
			fa, fb := strings.Fields(a), strings.Fields(b)
			return strings.Compare(fa[0]+" "+fa[1], fb[0]+" "+fb[1])
		})
		return all
	}
	cases := []struct {
		name     string
		findings []Finding
		want     map[string][]string // namespace/name -> results
		summary  map[string]openreports.ReportSummary
	}{
		{
			name:     "a compliant DaemonSet gets a pass per policy and one for inject",
			findings: []Finding{{Namespace: "a", Name: "agent"}},
			want:     map[string][]string{"a/daemonguard": passes("agent")},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 5}},
		},
		{
			name:     "a deny violation fails with high severity and its message, the other policies pass",
			findings: []Finding{{Namespace: "a", Name: "wide", Violations: []policy.Violation{violation("rolling_update_budget", policy.Deny, "too wide")}}},
			want:     map[string][]string{"a/daemonguard": sorted(passes("wide", "rolling_update_budget"), []string{"wide rolling_update_budget fail high too wide"})},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 4, Fail: 1}},
		},
		{
			name:     "a warn violation warns with medium severity",
			findings: []Finding{{Namespace: "a", Name: "od", Violations: []policy.Violation{violation("on_delete_managed", policy.Warn, "not managed")}}},
			want:     map[string][]string{"a/daemonguard": sorted(passes("od", "on_delete_managed"), []string{"od on_delete_managed warn medium not managed"})},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 4, Warn: 1}},
		},
		{
			name:     "a dryrun violation fails with low severity: it shows what the policy would reject",
			findings: []Finding{{Namespace: "a", Name: "ann", Violations: []policy.Violation{violation("rollout_annotations", policy.DryRun, "bad deadline")}}},
			want:     map[string][]string{"a/daemonguard": sorted(passes("ann", "rollout_annotations"), []string{"ann rollout_annotations fail low bad deadline"})},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 4, Fail: 1}},
		},
		{
			name:     "the action of the violation wins over the policy's current one",
			findings: []Finding{{Namespace: "a", Name: "x", Violations: []policy.Violation{violation("revision_history", policy.Warn, "short")}}},
			want:     map[string][]string{"a/daemonguard": sorted(passes("x", "revision_history"), []string{"x revision_history warn medium short"})},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 4, Warn: 1}},
		},
		{
			name:     "two violations of one policy give two results",
			findings: []Finding{{Namespace: "a", Name: "x", Violations: []policy.Violation{violation("revision_history", policy.Deny, "too few"), violation("revision_history", policy.Deny, "too fast")}}},
			want:     map[string][]string{"a/daemonguard": sorted(passes("x", "revision_history"), []string{"x revision_history fail high too few", "x revision_history fail high too fast"})},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 4, Fail: 2}},
		},
		{
			name:     "missing injection warns on the inject policy",
			findings: []Finding{{Namespace: "a", Name: "seed", MissingInjection: true}},
			want:     map[string][]string{"a/daemonguard": sorted(passes("seed", "inject"), []string{"seed inject warn medium " + missingInjectionMsg})},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 4, Warn: 1}},
		},
		{
			name:     "a DaemonSet whose policies could not be evaluated gets one error result and no pass",
			findings: []Finding{{Namespace: "a", Name: "broken", Error: "eval_conflict_error"}},
			want:     map[string][]string{"a/daemonguard": {"broken evaluation error  policies could not be evaluated: eval_conflict_error"}},
			summary:  map[string]openreports.ReportSummary{"a/daemonguard": {Error: 1}},
		},
		{
			name:     "each namespace gets its own report, DaemonSets in name order",
			findings: []Finding{{Namespace: "b", Name: "z"}, {Namespace: "a", Name: "y"}, {Namespace: "b", Name: "c"}},
			want: map[string][]string{
				"a/daemonguard": passes("y"),
				"b/daemonguard": slices.Concat(passes("c"), passes("z")),
			},
			summary: map[string]openreports.ReportSummary{"a/daemonguard": {Pass: 5}, "b/daemonguard": {Pass: 10}},
		},
		{
			name:     "no findings, no reports",
			findings: nil,
			want:     map[string][]string{},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reports := Reports(c.findings, testPolicies, now)
			got := map[string][]string{}
			for _, r := range reports {
				key := r.Namespace + "/" + r.Name
				got[key] = describeReport(r)
				if r.APIVersion != "openreports.io/v1alpha1" || r.Kind != "Report" || r.Source != ReportSource || r.Labels[ManagedByLabel] != ManagedByValue {
					t.Errorf("%s: type %s/%s, source %q, labels %v", key, r.APIVersion, r.Kind, r.Source, r.Labels)
				}
				if r.Summary != c.summary[key] {
					t.Errorf("%s: summary %+v, want %+v", key, r.Summary, c.summary[key])
				}
				for _, res := range r.Results {
					if res.Timestamp.Seconds != now.Unix() {
						t.Errorf("%s: result %s stamped %v, want %v", key, res.Policy, res.Timestamp, now.Unix())
					}
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("reports %v, want %v", keysOf(got), keysOf(c.want))
			}
			for key, want := range c.want {
				if !slices.Equal(got[key], want) {
					t.Errorf("%s results:\n  got  %q\n  want %q", key, got[key], want)
				}
			}
		})
	}
}

func keysOf(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestReportsAreDeterministic(t *testing.T) {
	var findings []Finding
	for i := range 50 {
		findings = append(findings, Finding{Namespace: fmt.Sprintf("ns-%d", i%3), Name: fmt.Sprintf("ds-%02d", i), UID: types.UID(fmt.Sprint(i))})
	}
	now := time.Unix(1_800_000_000, 0)
	want, err := json.Marshal(Reports(findings, testPolicies, now))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		shuffled := slices.Clone(findings)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got, _ := json.Marshal(Reports(shuffled, testPolicies, now))
		if string(got) != string(want) {
			t.Fatal("the reports depend on the order of the findings")
		}
	}
}

func TestPlanReports(t *testing.T) {
	old, now := time.Unix(1_700_000_000, 0), time.Unix(1_800_000_000, 0)
	clean := []Finding{{Namespace: "a", Name: "agent", UID: "u1"}, {Namespace: "a", Name: "wide", UID: "u2"}}
	violating := []Finding{{Namespace: "a", Name: "agent", UID: "u1"}, {Namespace: "a", Name: "wide", UID: "u2", Violations: []policy.Violation{violation("rolling_update_budget", policy.Deny, "too wide")}}}
	stored := func(findings []Finding, at time.Time) []openreports.Report {
		reports := Reports(findings, testPolicies, at)
		for i := range reports {
			reports[i].ResourceVersion = "42"
			reports[i].UID = "report-uid"
			// The API server's round trip drops empty maps; the plan must not see a change there.
			for j := range reports[i].Results {
				if len(reports[i].Results[j].Properties) == 0 {
					reports[i].Results[j].Properties = nil
				}
			}
		}
		return reports
	}
	cases := []struct {
		name                    string
		existing                []openreports.Report
		desired                 []Finding
		create, update, delete  []string
		freshStamps, keptStamps int // in the single update
	}{
		{name: "a namespace's first report is created", desired: clean, create: []string{"a/daemonguard"}},
		{name: "an unchanged report is not written, though the clock moved on", existing: stored(clean, old), desired: clean},
		{
			name:     "a changed result updates the report: the new result is stamped now, unchanged ones keep their stamp",
			existing: stored(clean, old), desired: violating, update: []string{"a/daemonguard"},
			freshStamps: 1, keptStamps: 9,
		},
		{name: "the report of a namespace without DaemonSets is deleted", existing: stored(clean, old), desired: nil, delete: []string{"a/daemonguard"}},
		{
			name:     "a part no longer needed is deleted, the first kept",
			existing: append(stored(clean, old), openreports.Report{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "daemonguard-1"}}),
			desired:  clean, delete: []string{"a/daemonguard-1"},
		},
	}
	names := func(rs []openreports.Report) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Namespace+"/"+r.Name)
		}
		return out
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			changes := PlanReports(c.existing, Reports(c.desired, testPolicies, now))
			if !slices.Equal(names(changes.Create), c.create) || !slices.Equal(names(changes.Update), c.update) || !slices.Equal(names(changes.Delete), c.delete) {
				t.Fatalf("changes: create %v update %v delete %v; want %v %v %v", names(changes.Create), names(changes.Update), names(changes.Delete), c.create, c.update, c.delete)
			}
			if len(changes.Update) == 1 {
				u := changes.Update[0]
				if u.ResourceVersion != "42" || u.UID != "report-uid" {
					t.Errorf("update lost the stored metadata: resourceVersion %q uid %q", u.ResourceVersion, u.UID)
				}
				fresh, kept := 0, 0
				for _, res := range u.Results {
					switch res.Timestamp.Seconds {
					case now.Unix():
						fresh++
					case old.Unix():
						kept++
					}
				}
				if fresh != c.freshStamps || kept != c.keptStamps {
					t.Errorf("update stamps: %d now, %d kept; want %d, %d", fresh, kept, c.freshStamps, c.keptStamps)
				}
				if u.Summary != (openreports.ReportSummary{Pass: 9, Fail: 1}) {
					t.Errorf("update summary %+v", u.Summary)
				}
			}
		})
	}
}

// A namespace with thousands of DaemonSets, and a DaemonSet with thousands of violations of a
// custom policy with long messages, are split into Reports that each stay within MaxReportBytes,
// and no result is lost.
func TestReportsStayWithinTheSizeLimit(t *testing.T) {
	long := strings.Repeat("ü", 3000) // 6000 bytes: truncated
	var findings []Finding
	for i := range 5000 {
		f := Finding{Namespace: "big", Name: fmt.Sprintf("agent-%05d", i), UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))}
		if i%2 == 0 {
			f.Violations = []policy.Violation{violation("rolling_update_budget", policy.Deny, strings.Repeat("maxUnavailable is too wide ", 10))}
		}
		findings = append(findings, f)
	}
	var many []policy.Violation
	for i := range 3000 {
		many = append(many, policy.Violation{Policy: "custom", Field: fmt.Sprintf("spec.x[%d]", i), Message: long, Action: policy.Deny})
	}
	findings = append(findings, Finding{Namespace: "huge", Name: "one", Violations: many})

	reports := Reports(findings, testPolicies, time.Unix(1_800_000_000, 0))
	results := map[string]int{}
	parts := map[string][]string{}
	dsReports := map[string]map[string]bool{} // DaemonSet -> reports holding its results
	for _, r := range reports {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > MaxReportBytes {
			t.Errorf("%s/%s encodes to %d bytes, over %d", r.Namespace, r.Name, len(raw), MaxReportBytes)
		}
		results[r.Namespace] += len(r.Results)
		parts[r.Namespace] = append(parts[r.Namespace], r.Name)
		s := r.Summary
		if s.Pass+s.Fail+s.Warn+s.Error+s.Skip != len(r.Results) {
			t.Errorf("%s/%s summary %+v does not count its %d results", r.Namespace, r.Name, s, len(r.Results))
		}
		for _, res := range r.Results {
			if len(res.Description) > maxTextBytes {
				t.Errorf("message of %d bytes not truncated", len(res.Description))
			}
			ds := r.Namespace + "/" + res.Subjects[0].Name
			if dsReports[ds] == nil {
				dsReports[ds] = map[string]bool{}
			}
			dsReports[ds][r.Name] = true
		}
	}
	if want := 5000 * 5; results["big"] != want {
		t.Errorf("namespace big has %d results, want %d", results["big"], want)
	}
	if want := 3000 + 4 + 1; results["huge"] != want { // the violations, 4 passes, inject
		t.Errorf("namespace huge has %d results, want %d", results["huge"], want)
	}
	for ns, names := range parts {
		if len(names) < 2 {
			t.Errorf("namespace %s fits one report (%v); the test no longer exercises the split", ns, names)
		}
		for i, name := range names {
			if name != reportName(i) {
				t.Errorf("namespace %s report %d is named %s, want %s", ns, i, name, reportName(i))
			}
		}
	}
	for ds, in := range dsReports {
		if len(in) != 1 && ds != "huge/one" {
			t.Errorf("results of %s are spread over %v", ds, in)
		}
	}
	t.Logf("big: %d results in %d reports; huge: %d results in %d reports", results["big"], len(parts["big"]), results["huge"], len(parts["huge"]))
}
