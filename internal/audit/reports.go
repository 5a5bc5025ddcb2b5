package audit

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// OpenReports conventions of daemonguard's Reports. Consumers (Policy Reporter, kubectl get reps)
// find them by ReportSource; daemonguard finds its own by ManagedByLabel and never touches others.
const (
	ReportSource        = "daemonguard"
	ManagedByLabel      = "app.kubernetes.io/managed-by"
	ManagedByValue      = "daemonguard"
	ReportName          = "daemonguard"
	InjectPolicy        = "inject"
	EvaluationPolicy    = "evaluation" // the result of a DaemonSet whose policies could not be evaluated
	reportAPIVersion    = "openreports.io/v1alpha1"
	reportKind          = "Report"
	propertyAction      = "action"
	propertyField       = "field"
	missingInjectionMsg = "the stored pod template lacks what daemonguard's inject policy adds (control-plane tolerations, priority class); re-apply the manifest to get it"
)

// MaxReportBytes bounds the JSON encoding of one Report. etcd rejects requests above 1.5 MiB (its
// default --max-request-bytes); a third of that leaves room for the metadata the API server adds
// (managed fields, annotations) and keeps every watch event of Policy Reporter small. A namespace
// whose results do not fit gets several Reports: daemonguard, daemonguard-1, daemonguard-2, ...
const MaxReportBytes = 512 << 10

// maxTextBytes caps a message or field taken from a policy, so that one result always fits a
// Report whatever a custom Rego policy prints.
const maxTextBytes = 2 << 10

// reportOverheadBytes is what a Report's encoding adds to its results: type, metadata, source,
// summary, with room to spare (measured: under 300 bytes).
const reportOverheadBytes = 1 << 10

// PolicyActions returns the enforcement action of every validation policy of set.
func PolicyActions(set *policy.Set) map[string]policy.Action {
	out := make(map[string]policy.Action, len(set.Policies()))
	for _, name := range set.Policies() {
		out[name] = set.Enforcement(name)
	}
	return out
}

// ResultOf maps an enforcement action to the result of a violation: deny and dryrun fail (a dryrun
// policy is one being tried out before it is enforced: the report shows what it would reject, as
// Kyverno reports its Audit-mode policies), warn warns.
func ResultOf(a policy.Action) openreports.Result {
	if a == policy.Warn {
		return "warn"
	}
	return "fail"
}

// SeverityOf maps an enforcement action to a severity: deny is high, warn medium, dryrun low.
func SeverityOf(a policy.Action) openreports.ResultSeverity {
	switch a {
	case policy.Warn:
		return "medium"
	case policy.DryRun:
		return "low"
	}
	return "high"
}

// Reports decides the Reports that describe findings: one per namespace with findings (split when
// its results exceed MaxReportBytes), with per DaemonSet one result per violation, a pass for each
// policy of policies (name to enforcement action) it does not violate, and an inject result. The
// results are stamped with now; PlanReports keeps the stamp of a result that did not change.
func Reports(findings []Finding, policies map[string]policy.Action, now time.Time) []openreports.Report {
	names := make([]string, 0, len(policies))
	for name := range policies {
		names = append(names, name)
	}
	slices.Sort(names)
	stamp := metav1.Timestamp{Seconds: now.Unix()}

	byNamespace := map[string][][]openreports.ReportResult{} // namespace -> per DaemonSet results
	var namespaces []string
	sorted := slices.Clone(findings)
	slices.SortFunc(sorted, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, f := range sorted {
		if _, ok := byNamespace[f.Namespace]; !ok {
			namespaces = append(namespaces, f.Namespace)
		}
		byNamespace[f.Namespace] = append(byNamespace[f.Namespace], resultsOf(f, names, policies, stamp))
	}
	var out []openreports.Report
	for _, ns := range namespaces {
		for i, results := range split(byNamespace[ns]) {
			out = append(out, newReport(ns, reportName(i), results))
		}
	}
	return out
}

func reportName(part int) string {
	if part == 0 {
		return ReportName
	}
	return ReportName + "-" + strconv.Itoa(part)
}

func resultsOf(f Finding, names []string, policies map[string]policy.Action, stamp metav1.Timestamp) []openreports.ReportResult {
	subject := []corev1.ObjectReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: f.Namespace, Name: f.Name, UID: f.UID}}
	result := func(policyName string, r openreports.Result, action policy.Action, message string, props map[string]string) openreports.ReportResult {
		res := openreports.ReportResult{
			Source: ReportSource, Policy: policyName, Result: r, Timestamp: stamp, Subjects: subject,
			Description: kubetext.Truncate(message, maxTextBytes), Scored: r != "warn" && r != "error", Properties: props,
		}
		if action != "" {
			res.Severity = SeverityOf(action)
			if res.Properties == nil {
				res.Properties = map[string]string{}
			}
			res.Properties[propertyAction] = string(action)
		}
		return res
	}
	if f.Error != "" {
		return []openreports.ReportResult{result(EvaluationPolicy, "error", "", "policies could not be evaluated: "+f.Error, nil)}
	}
	var out []openreports.ReportResult
	violated := map[string]bool{}
	for _, v := range f.Violations {
		violated[v.Policy] = true
		out = append(out, result(v.Policy, ResultOf(v.Action), v.Action, v.Message, map[string]string{propertyField: kubetext.Truncate(v.Field, maxTextBytes)}))
	}
	for _, name := range names {
		if !violated[name] {
			out = append(out, result(name, "pass", policies[name], "", nil))
		}
	}
	if f.MissingInjection {
		out = append(out, result(InjectPolicy, "warn", "", missingInjectionMsg, nil))
		out[len(out)-1].Severity = "medium"
	} else {
		out = append(out, result(InjectPolicy, "pass", "", "", nil))
	}
	slices.SortStableFunc(out, func(a, b openreports.ReportResult) int { return cmp.Compare(a.Policy, b.Policy) })
	return out
}

// split packs the per DaemonSet result groups, in order, into parts whose encoding stays within
// MaxReportBytes. A DaemonSet's results stay in one part unless they alone exceed the limit.
func split(groups [][]openreports.ReportResult) [][]openreports.ReportResult {
	budget := MaxReportBytes - reportOverheadBytes
	var parts [][]openreports.ReportResult
	var current []openreports.ReportResult
	used := 0
	flush := func() {
		if len(current) > 0 {
			parts = append(parts, current)
		}
		current, used = nil, 0
	}
	for _, group := range groups {
		sizes := make([]int, len(group))
		total := 0
		for i, r := range group {
			sizes[i] = encodedSize(r)
			total += sizes[i]
		}
		if used+total > budget && total <= budget {
			flush()
		}
		for i, r := range group {
			if used+sizes[i] > budget {
				flush()
			}
			current = append(current, r)
			used += sizes[i]
		}
	}
	flush()
	return parts
}

// encodedSize is the bytes a result adds to a Report's JSON (its encoding and a comma).
func encodedSize(r openreports.ReportResult) int {
	raw, err := json.Marshal(r)
	if err != nil {
		return MaxReportBytes // cannot happen for these plain types; counts as a part of its own
	}
	return len(raw) + 1
}

func newReport(namespace, name string, results []openreports.ReportResult) openreports.Report {
	r := openreports.Report{
		TypeMeta: metav1.TypeMeta{APIVersion: reportAPIVersion, Kind: reportKind},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{ManagedByLabel: ManagedByValue},
		},
		Source:  ReportSource,
		Results: results,
	}
	for _, res := range results {
		switch res.Result {
		case "pass":
			r.Summary.Pass++
		case "fail":
			r.Summary.Fail++
		case "warn":
			r.Summary.Warn++
		case "error":
			r.Summary.Error++
		case "skip":
			r.Summary.Skip++
		}
	}
	return r
}

// ReportChanges are the writes that bring the cluster's Reports to the desired ones.
type ReportChanges struct {
	Create, Update, Delete []openreports.Report
}

// Empty tells whether nothing needs writing.
func (c ReportChanges) Empty() bool {
	return len(c.Create)+len(c.Update)+len(c.Delete) == 0
}

// PlanReports compares the existing daemonguard Reports with the desired ones. A desired result
// equal to an existing one but for its timestamp keeps the existing timestamp (when the outcome was
// first seen), so an audit pass that finds nothing new writes nothing. Updates carry the existing
// object's metadata (resourceVersion: a concurrent writer makes the update conflict, not clobber).
func PlanReports(existing, desired []openreports.Report) ReportChanges {
	have := make(map[string]openreports.Report, len(existing))
	for _, r := range existing {
		have[r.Namespace+"/"+r.Name] = r
	}
	var changes ReportChanges
	wanted := map[string]bool{}
	for _, want := range desired {
		key := want.Namespace + "/" + want.Name
		wanted[key] = true
		old, ok := have[key]
		if !ok {
			changes.Create = append(changes.Create, want)
			continue
		}
		stamps := map[string]metav1.Timestamp{}
		for _, res := range old.Results {
			stamps[resultKey(res)] = res.Timestamp
		}
		want.Results = slices.Clone(want.Results)
		for i := range want.Results {
			if ts, ok := stamps[resultKey(want.Results[i])]; ok {
				want.Results[i].Timestamp = ts
			}
		}
		if sameContent(old, want) {
			continue
		}
		updated := *old.DeepCopy()
		if updated.Labels == nil {
			updated.Labels = map[string]string{}
		}
		for k, v := range want.Labels {
			updated.Labels[k] = v
		}
		updated.Source, updated.Scope, updated.ScopeSelector, updated.Configuration = want.Source, want.Scope, want.ScopeSelector, want.Configuration
		updated.Summary, updated.Results = want.Summary, want.Results
		changes.Update = append(changes.Update, updated)
	}
	for _, old := range existing {
		if !wanted[old.Namespace+"/"+old.Name] {
			changes.Delete = append(changes.Delete, old)
		}
	}
	return changes
}

// resultKey identifies a result by everything but its timestamp.
func resultKey(r openreports.ReportResult) string {
	r.Timestamp = metav1.Timestamp{}
	raw, _ := json.Marshal(r) // map keys are sorted: a stable key
	return string(raw)
}

func sameContent(old, want openreports.Report) bool {
	for k, v := range want.Labels {
		if old.Labels[k] != v {
			return false
		}
	}
	return old.Source == want.Source && equality.Semantic.DeepEqual(old.Scope, want.Scope) &&
		equality.Semantic.DeepEqual(old.ScopeSelector, want.ScopeSelector) &&
		equality.Semantic.DeepEqual(old.Configuration, want.Configuration) &&
		old.Summary == want.Summary && equality.Semantic.DeepEqual(normalize(old.Results), normalize(want.Results))
}

// normalize treats empty and absent maps and lists alike, as they are after a round trip through
// the API server.
func normalize(results []openreports.ReportResult) []openreports.ReportResult {
	out := make([]openreports.ReportResult, len(results))
	for i, r := range results {
		if len(r.Properties) == 0 {
			r.Properties = nil
		}
		if len(r.Subjects) == 0 {
			r.Subjects = nil
		}
		out[i] = r
	}
	return out
}

// String describes the changes for the log.
func (c ReportChanges) String() string {
	return fmt.Sprintf("%d created, %d updated, %d deleted", len(c.Create), len(c.Update), len(c.Delete))
}
