package preflight

// This file writes `rollout plan` reports: a table for people, markdown for a pull-request
// comment, JSON for programs (the schema is Report's, documented in docs/preflight.md); over
// several contexts (RenderFleet) a summary row per cluster and DaemonSet first, then the full
// plan of each cluster with a finding, in the same words.

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
)

// markdownNodeRows bounds the node table of a pull-request comment; -o json has every node.
const markdownNodeRows = 50

// Render writes the reports as format: "table", "markdown" or "json".
func Render(w io.Writer, format string, reports []Report) error {
	switch format {
	case "json":
		return writeJSON(w, struct {
			Items    []Report `json:"items"`
			ExitCode int      `json:"exitCode"`
		}{reports, ExitStatus(reports)})
	case "markdown":
		return renderMarkdown(w, reports)
	}
	return renderTable(w, reports)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func renderTable(w io.Writer, reports []Report) error {
	if len(reports) == 0 {
		_, err := fmt.Fprintln(w, "no DaemonSet in the manifests")
		return err
	}
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "DaemonSet %s/%s (%s)\n", r.Namespace, r.Name, r.Source)
		if r.Error != "" {
			fmt.Fprintf(w, "  ERROR: %s\n", r.Error)
			continue
		}
		for _, line := range admissionLines(r) {
			fmt.Fprintln(w, "  "+line)
		}
		if r.Plan == nil {
			continue
		}
		p := r.Plan
		for _, line := range planHeadLines(p) {
			fmt.Fprintln(w, "  "+line)
		}
		rows := listedNodes(p)
		if len(rows) > 0 {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  NODE\tTODAY\tAFTER\tWHY")
			for _, n := range rows {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", n.Node, today(n), n.Change, n.Reason)
				for _, issue := range fitLines(n.Fit) {
					fmt.Fprintf(tw, "  \t\t\t! %s\n", issue)
				}
			}
			if err := tw.Flush(); err != nil {
				return err
			}
		}
		for _, line := range rolloutLines(p.Rollout) {
			fmt.Fprintln(w, "  "+line)
		}
		for _, line := range analysisLines(p.Analysis) {
			fmt.Fprintln(w, "  "+line)
		}
		if r.Admission.Diff != "" {
			fmt.Fprintln(w, "  diff:")
			fmt.Fprint(w, kubetext.Indent(r.Admission.Diff, "    "))
		}
	}
	return nil
}

func renderMarkdown(w io.Writer, reports []Report) error {
	fmt.Fprintln(w, "### daemonguard rollout plan")
	if len(reports) == 0 {
		_, err := fmt.Fprintln(w, "\nNo DaemonSet in the manifests.")
		return err
	}
	return renderMarkdownReports(w, reports)
}

// renderMarkdownReports writes each DaemonSet's section of a plan, under the plan's heading or
// a fleet's cluster.
func renderMarkdownReports(w io.Writer, reports []Report) error {
	for _, r := range reports {
		fmt.Fprintf(w, "\n#### DaemonSet `%s/%s`\n\n", r.Namespace, r.Name)
		if r.Error != "" {
			fmt.Fprintf(w, "**Error:** %s\n", mdEscape(r.Error))
			continue
		}
		for _, line := range admissionLines(r) {
			fmt.Fprintf(w, "- %s\n", mdEscape(line))
		}
		if r.Plan == nil {
			continue
		}
		p := r.Plan
		for _, line := range planHeadLines(p) {
			fmt.Fprintf(w, "- %s\n", mdEscape(line))
		}
		if rows := listedNodes(p); len(rows) > 0 {
			fmt.Fprintln(w, "\n| node | today | after | why |\n|---|---|---|---|")
			for i, n := range rows {
				if i == markdownNodeRows {
					fmt.Fprintf(w, "\n… and %d more nodes (`-o json` lists every node).\n", len(rows)-markdownNodeRows)
					break
				}
				why := n.Reason
				if issues := fitLines(n.Fit); len(issues) > 0 {
					why = strings.TrimPrefix(why+"; **"+strings.Join(issues, "; ")+"**", "; ")
				}
				fmt.Fprintf(w, "| %s | %s | %s | %s |\n", n.Node, mdEscape(today(n)), n.Change, mdEscape(why))
			}
		}
		fmt.Fprintln(w)
		for _, line := range rolloutLines(p.Rollout) {
			fmt.Fprintf(w, "%s  \n", mdEscape(strings.TrimSpace(line)))
		}
		if lines := analysisLines(p.Analysis); len(lines) > 0 {
			// The gates are a list under the check's first line, apart from the rollout's lines.
			fmt.Fprintf(w, "\n%s\n\n", mdEscape(lines[0]))
			for _, line := range lines[1:] {
				fmt.Fprintf(w, "- %s\n", mdEscape(strings.TrimSpace(line)))
			}
		}
		if r.Admission.Diff != "" {
			fmt.Fprintf(w, "\n<details><summary>diff against the live object</summary>\n\n```diff\n%s```\n</details>\n", r.Admission.Diff)
		}
	}
	return nil
}

// RenderFleet writes a fleet plan as format: "table", "markdown" or "json". The table and the
// markdown open with one summary row per DaemonSet and cluster (fleetRows), and then give the
// full plan of each cluster with a finding, as Render gives one cluster's; a cluster without a
// finding is its rows alone (-o json has every cluster's whole plan).
func RenderFleet(w io.Writer, format string, plans []ClusterPlan) error {
	rows := fleetRows(plans)
	switch format {
	case "json":
		return writeJSON(w, struct {
			Clusters []ClusterPlan `json:"clusters"`
			ExitCode int           `json:"exitCode"`
		}{plans, FleetExitStatus(plans)})
	case "markdown":
		fmt.Fprintf(w, "### daemonguard rollout plan over %s\n\n", count(len(plans), "cluster"))
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.ToLower(strings.Join(fleetHeader, " | ")), strings.Repeat("---|", len(fleetHeader)))
		for _, row := range rows {
			cells := make([]string, len(row))
			for i, c := range row {
				cells[i] = mdEscape(c)
			}
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
		folded := 0
		for _, p := range plans {
			if !p.finding() {
				continue
			}
			if folded++; folded > markdownFleetPlans {
				fmt.Fprintf(w, "\n… and the plans of %s with a finding (`-o json` has every cluster's plan).\n", count(findings(plans)-markdownFleetPlans, "more cluster"))
				break
			}
			fmt.Fprintf(w, "\n<details><summary>%s: exit %d</summary>\n", html.EscapeString(p.Context), p.ExitCode)
			if err := renderMarkdownReports(w, p.Items); err != nil {
				return err
			}
			fmt.Fprintln(w, "\n</details>")
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(fleetHeader, "\t"))
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range plans {
		if !p.finding() {
			continue
		}
		fmt.Fprintf(w, "\n=== context %s: exit %d\n", p.Context, p.ExitCode)
		if err := renderTable(w, p.Items); err != nil {
			return err
		}
	}
	return nil
}

// markdownFleetPlans bounds the clusters whose whole plan a pull-request comment folds in: each
// can hold markdownNodeRows nodes and a diff, and a comment holds 65,536 characters.
const markdownFleetPlans = 10

// finding says the cluster was planned and its plan has a finding (exit 2, 3 or 4).
func (p ClusterPlan) finding() bool { return p.ExitCode != 0 && p.Error == "" }

// findings counts the clusters planned with a finding.
func findings(plans []ClusterPlan) int {
	n := 0
	for _, p := range plans {
		if p.finding() {
			n++
		}
	}
	return n
}

// fleetHeader names the columns of fleetRows.
var fleetHeader = []string{"CONTEXT", "DAEMONSET", "GAIN", "LOSE", "REPLACE", "NOT FIT", "PREEMPTS", "DENIED BY", "GATES FAILING TODAY", "EXIT", "NOTE"}

// fleetRows are a fleet plan's summary, one row of fleetHeader's cells per DaemonSet and
// cluster, in the order of the contexts and of the manifests: the nodes that gain, lose or have
// their pod replaced, those where the new pod does not fit or preempts, the policies that deny,
// the analysis gates that would not pass today, and the exit status `rollout plan` gives for it.
// A cluster that could not be planned is one row with its error; "-" is a count not made.
func fleetRows(plans []ClusterPlan) [][]string {
	var rows [][]string
	for _, p := range plans {
		switch {
		case p.Error != "":
			rows = append(rows, []string{p.Context, "-", "-", "-", "-", "-", "-", "-", "-", strconv.Itoa(p.ExitCode), "ERROR: " + p.Error})
			continue
		case len(p.Items) == 0:
			rows = append(rows, []string{p.Context, "-", "-", "-", "-", "-", "-", "-", "-", strconv.Itoa(p.ExitCode), "no DaemonSet in the manifests"})
			continue
		}
		for _, r := range p.Items {
			row := []string{p.Context, r.Namespace + "/" + r.Name, "-", "-", "-", "-", "-", "-", "-", strconv.Itoa(ExitStatus([]Report{r})), ""}
			switch {
			case r.Error != "":
				row[10] = "ERROR: " + r.Error
			case !r.Admission.Allowed:
				row[7], row[10] = deniedBy(r.Admission), "WOULD BE DENIED: nothing is applied"
			case r.Plan != nil:
				s := r.Plan.Summary
				row[2], row[3], row[4], row[5], row[6] = strconv.Itoa(s.Gains), strconv.Itoa(s.Loses), strconv.Itoa(s.Replaced), strconv.Itoa(s.NotFit), strconv.Itoa(s.Preempting)
				row[8], row[10] = gatesFailing(r.Plan.Analysis), fleetNote(r.Plan)
			}
			rows = append(rows, row)
		}
	}
	// Each cell on one line: an error or a context's name with a line break or a tab would
	// break the table's rows and columns.
	oneLine := strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ", "\t", " ")
	for _, row := range rows {
		for i := range row {
			row[i] = oneLine.Replace(row[i])
		}
	}
	return rows
}

// deniedBy names the policies that deny, or says "denied" when none is named.
func deniedBy(a AdmissionReport) string {
	var names []string
	for _, v := range a.Violations {
		if v.Action == policy.Deny && !slices.Contains(names, v.Policy) {
			names = append(names, v.Policy)
		}
	}
	if len(names) == 0 {
		return "denied"
	}
	return strings.Join(names, ", ")
}

// gatesFailing names the gates that would not pass today and why, "none" when every gate run
// passes, "not run" when the queries were not run, "-" without gates.
func gatesFailing(c *AnalysisCheck) string {
	switch {
	case c == nil || len(c.Gates) == 0 && c.Error == "":
		return "-"
	case c.Error != "":
		return "check failed: " + c.Error
	case !c.Ran:
		return "not run"
	}
	why := map[string]string{GateFail: "would fail", GateMissing: "no series", GateError: "no answer"}
	var out []string
	for _, g := range c.Gates {
		if w, ok := why[g.Result]; ok {
			out = append(out, g.Name+" ("+w+")")
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// fleetNote is a planned DaemonSet's note: what kind of change it is, and its problems.
func fleetNote(p *Impact) string {
	note := "new revision"
	switch {
	case !p.NewRevision:
		note = "pod template unchanged: no pod is touched"
	case p.Operation != "update":
		note = "new DaemonSet"
	}
	for _, problem := range p.Problems {
		note += "; PROBLEM: " + problem
	}
	return note
}

func admissionLines(r Report) []string {
	a := r.Admission
	var out []string
	switch {
	case a.Injection == "none" && a.Validation == "none":
		out = append(out, "admission: daemonguard is not installed in this cluster; the object is stored as written")
	case a.Skip != "":
		out = append(out, "admission: daemonguard leaves it alone ("+a.Skip+")")
	default:
		inj := "no change"
		if a.Mutated {
			inj = "injects"
		}
		out = append(out, fmt.Sprintf("admission: injection %s (%s), validation %s", a.Injection, inj, a.Validation))
		if a.Policies != "" {
			out = append(out, "policies: "+a.Policies)
		}
	}
	for _, v := range a.Violations {
		out = append(out, fmt.Sprintf("%s %s", v.Action.Label(), v))
	}
	if !a.Allowed {
		out = append(out, "WOULD BE DENIED: nothing is applied")
	}
	return out
}

func planHeadLines(p *Impact) []string {
	var out []string
	if !p.NewRevision {
		out = append(out, "pod template unchanged: no new revision, no pod is touched")
	} else if p.Operation == "update" {
		out = append(out, "new revision: the pod template changes "+strings.Join(p.TemplateChanges, ", "))
	} else {
		out = append(out, "new DaemonSet")
	}
	for _, problem := range p.Problems {
		out = append(out, "PROBLEM: "+problem)
	}
	s := p.Summary
	line := fmt.Sprintf("nodes: %d; %d gain a pod, %d lose it, %d replaced, %d keep the old pod, %d unchanged", s.Nodes, s.Gains, s.Loses, s.Replaced, s.Keeps, s.Unchanged)
	if s.NotFit > 0 || s.Preempting > 0 {
		line += fmt.Sprintf("; the new pod does not fit on %d and preempts other pods on %d", s.NotFit, s.Preempting)
	}
	return append(out, line)
}

// listedNodes are the nodes worth a row: those that change, and any with a fit issue.
func listedNodes(p *Impact) []NodeImpact {
	var out []NodeImpact
	for _, n := range p.Nodes {
		if n.Change != Unchanged && n.Change != None || len(fitLines(n.Fit)) > 0 {
			out = append(out, n)
		}
	}
	return out
}

func today(n NodeImpact) string {
	if n.Today == nil {
		return "-"
	}
	state := "not ready"
	if n.Today.Ready {
		state = "ready"
	}
	return fmt.Sprintf("%s (%s, %s)", n.Today.Name, n.Today.Revision, state)
}

func fitLines(f *FitResult) []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, s := range f.Insufficient {
		out = append(out, "does not fit: "+s)
	}
	for _, s := range f.HostPortConflicts {
		out = append(out, "host port taken: "+s)
	}
	for _, v := range f.Preempts {
		out = append(out, "preempts "+v.String())
	}
	if !f.Schedulable {
		out = append(out, "stays Pending: preempting lower-priority pods would not make room")
	}
	return out
}

func rolloutLines(r Rollout) []string {
	out := []string{"rollout: " + r.Summary}
	if r.Estimate > 0 {
		basis := "pods assumed ready at once: no pod of this DaemonSet is ready to time"
		if r.ReadyKnown {
			basis = fmt.Sprintf("its pods took %s to become ready", r.ReadyAfter.Round(time.Second))
		}
		out = append(out, fmt.Sprintf("estimate: %s (%s)", r.Estimate.Round(time.Second), basis))
	}
	if f := r.Managed; f != nil {
		out = append(out, "order: "+f.Order)
		out = append(out, gateLines(f.Gates)...)
		out = append(out, forecastLines(f)...)
		for _, s := range f.Skipped {
			out = append(out, "  left out: "+s)
		}
	}
	return out
}

// gateLines list the analysis gates every wave waits for, as the forecast counts them: passing.
func gateLines(gates []rolloutplan.GateSummary) []string {
	if len(gates) == 0 {
		return nil
	}
	out := []string{"analysis after each wave (the estimate assumes every measurement passes):"}
	for _, g := range gates {
		how := ""
		if g.Baseline {
			how = ", against a baseline of other nodes"
		}
		out = append(out, fmt.Sprintf("  gate %s: %d measurements %s apart%s: %s", g.Name, g.Count, g.Interval, how, g.Query))
	}
	return out
}

// analysisLines say what the analysis check found: a first line on what was measured (or why
// nothing was), then one line per gate that was run. Nodes and values are named as the rollout's
// messages name them, the first few and a count of the rest.
func analysisLines(c *AnalysisCheck) []string {
	switch {
	case c == nil:
		return nil
	case c.Error != "":
		return []string{"analysis check: ERROR: " + c.Error}
	case !c.Ran:
		names := make([]string, len(c.Gates))
		for i, g := range c.Gates {
			names[i] = g.Name
		}
		return []string{fmt.Sprintf("analysis check: the queries of %s (%s) were not run: %s", count(len(c.Gates), "gate"), strings.Join(names, ", "), c.NotRun)}
	}
	head := fmt.Sprintf("analysis check: each gate's query run once against revision %s on the %s that run it (Prometheus %s)", c.Revision, count(len(c.Nodes), "node"), c.Prometheus)
	if c.OtherRevisions > 0 {
		head += fmt.Sprintf("; %s running another revision left out", count(c.OtherRevisions, "node"))
	}
	out := []string{head + ":"}
	for _, g := range c.Gates {
		out = append(out, "  gate "+g.Name+": "+gateVerdict(g, len(c.Nodes)))
	}
	return out
}

// gateVerdict is one gate's line: the result first, in capitals when it would stop the rollout.
func gateVerdict(g GateCheck, nodes int) string {
	if g.Result == GateError {
		return "NO ANSWER from Prometheus: " + g.Error + "; the rollout would pause (inconclusive) until it answers"
	}
	bound := g.Bound
	if g.Baseline == BaselineToday {
		bound += ", the nodes measured today as the baseline"
	}
	var parts []string
	switch g.Result {
	case GatePass:
		if g.Baseline == BaselineRollout {
			parts = append(parts, fmt.Sprintf("passes: %d of %d nodes have a series", g.Measured, nodes))
		} else {
			parts = append(parts, fmt.Sprintf("passes: %d of %d nodes within bounds (%s)", g.Measured, nodes, bound))
		}
	case GateFail:
		values := make([]string, len(g.OutOfBounds))
		for i, nv := range g.OutOfBounds {
			value, err := strconv.ParseFloat(nv.Value, 64)
			if err == nil {
				nv.Value = rolloutanalysis.FormatValue(value)
			}
			values[i] = nv.Node + "=" + nv.Value
		}
		parts = append(parts, fmt.Sprintf("WOULD FAIL: %d of %d nodes out of bounds already (%s): %s", len(values), nodes, bound, kubetext.List(values)))
	case GateMissing:
		parts = append(parts, fmt.Sprintf("NO SERIES for %d of %d nodes: %s; the rollout would pause (inconclusive) until they have one", len(g.Missing), nodes, kubetext.List(g.Missing)))
		if g.Measured > 0 && g.Baseline != BaselineRollout {
			parts = append(parts, fmt.Sprintf("the other %d within bounds (%s)", g.Measured, bound))
		}
	}
	if g.Result == GateFail && len(g.Missing) > 0 {
		parts = append(parts, fmt.Sprintf("no series for %d of %d nodes: %s", len(g.Missing), nodes, kubetext.List(g.Missing)))
	}
	if g.Baseline == BaselineRollout {
		parts = append(parts, fmt.Sprintf("a baseline gate: with %d of %d nodes measured there is no median to judge them by; the rollout judges it against old-revision nodes, and only missing series are checked here", g.Measured, nodes))
	}
	return strings.Join(parts, "; ")
}

// count counts things for people: "1 node", "3 nodes".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// shownWaves bounds the waves listed in a row; pauses are always listed, in time order.
const shownWaves = 10

// forecastLines lists a managed rollout's waves and pauses in the order they happen; waves past
// the first shownWaves are counted between pauses, not listed.
func forecastLines(f *rolloutplan.Timeline) []string {
	var out []string
	shown, skipped := 0, 0
	var from, to time.Duration
	flush := func() {
		if skipped > 0 {
			out = append(out, fmt.Sprintf("  … %d more waves, from %s to %s", skipped, from.Round(time.Second), to.Round(time.Second)))
			skipped = 0
		}
	}
	pauses := f.Pauses
	for _, wv := range f.Waves {
		for len(pauses) > 0 && pauseFirst(pauses[0], wv) {
			flush()
			out = append(out, pauseLine(pauses[0]))
			pauses = pauses[1:]
		}
		if shown < shownWaves {
			out = append(out, fmt.Sprintf("  at %s, step %s: %s", wv.At.Round(time.Second), wv.Step, strings.Join(wv.Nodes, ", ")))
			shown++
			continue
		}
		if skipped == 0 {
			from = wv.At
		}
		skipped, to = skipped+1, wv.At
	}
	flush()
	for _, p := range pauses {
		out = append(out, pauseLine(p))
	}
	return out
}

// pauseFirst says whether pause p happens before wave w. At the same moment either can be first:
// a manual pause is resumed at once and the next step's wave follows it, while a pause reached as
// soon as the wave before it is Ready (pods Ready at once) follows that wave. Their steps tell.
func pauseFirst(p rolloutplan.PauseStep, w rolloutplan.Wave) bool {
	if p.At != w.At {
		return p.At < w.At
	}
	return p.StepIndex < w.StepIndex
}

func pauseLine(p rolloutplan.PauseStep) string {
	what := fmt.Sprintf("pauses %s", p.Duration)
	if p.Manual {
		what = "waits for `daemonguard rollout resume` (counted as no time)"
	}
	return fmt.Sprintf("  at %s, step %s: %s", p.At.Round(time.Second), p.Step, what)
}

func mdEscape(s string) string {
	return strings.NewReplacer("|", "\\|", "\n", " ").Replace(s)
}

// unifiedDiff is a unified diff of two JSON objects as YAML, without status and the server's
// bookkeeping; empty when they are the same.
func unifiedDiff(a, b []byte, from, to string) (string, error) {
	ya, err := diffableYAML(a)
	if err != nil {
		return "", err
	}
	yb, err := diffableYAML(b)
	if err != nil {
		return "", err
	}
	if ya == yb {
		return "", nil
	}
	return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(ya), B: difflib.SplitLines(yb), FromFile: from, ToFile: to, Context: 3,
	})
}

func diffableYAML(raw []byte) (string, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", err
	}
	delete(obj, "status")
	if meta, ok := obj["metadata"].(map[string]any); ok {
		for _, k := range []string{"managedFields", "resourceVersion", "uid", "generation", "creationTimestamp"} {
			delete(meta, k)
		}
		if ann, ok := meta["annotations"].(map[string]any); ok {
			delete(ann, lastAppliedAnnotation)
			delete(ann, "deprecated.daemonset.template.generation")
			if len(ann) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	out, err := yaml.Marshal(obj)
	return string(out), err
}
