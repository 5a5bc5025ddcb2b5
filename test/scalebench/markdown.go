package scalebench

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// none is the cell of a cost a run did not measure.
const none = "—"

// row is one line of the results table: a cost and how a run's value of it reads.
type row struct {
	group string // the component: a header row precedes each group's rows
	label string
	unit  string // after the label in the results table, after the value in the before → after one
	value func(Run) string
	// parts replaces the row in the before → after table when its cell holds several values (the
	// join storm), so that each changed value reads as its own arrow.
	parts []row
	// setup marks a row that describes the cluster rather than the build measured on it (the
	// date, the time to populate it, the budget): the before → after table leaves it out.
	setup bool
}

// Markdown renders the results as docs/performance.md shows them: one table with a column per
// cluster size and a row per cost, grouped by component; when runs compared a baseline build, a
// second table of the costs that differ, of the components the baseline was measured on,
// "before → after"; then the settings the clusters ran with. Values are rounded to what the
// benchmark can tell apart (seconds to a tenth below 100, MiB to the unit, milliseconds to a
// tenth) and carry thousands separators; a cost a run did not measure reads "—".
func (r Results) Markdown() string {
	var b strings.Builder
	if len(r.Runs) == 0 {
		b.WriteString("No cluster size measured yet.\n")
	} else {
		rows := tableRows(r.Runs)
		writeTable(&b, r.Runs, rows, true, func(run Run, row row) string { return row.value(run) })
		var compared []Run
		for _, run := range r.Runs {
			if run.Before != nil {
				compared = append(compared, run)
			}
		}
		if len(compared) > 0 {
			var changed []row
			for _, row := range expand(rows) {
				if !row.setup && differs(compared, rows, row) {
					changed = append(changed, row)
				}
			}
			b.WriteString("\nBefore → after, the baseline build against this one:\n\n")
			if len(changed) == 0 {
				b.WriteString("No cost differs at the precision shown.\n")
			} else {
				writeTable(&b, compared, changed, false, beforeAfter)
			}
		}
	}
	if len(r.Settings) > 0 {
		b.WriteString("\nSettings:\n\n")
		for _, s := range r.Settings {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	return b.String()
}

// writeTable writes a table with one column per run and the rows under their group's header;
// the labels name the unit unless the cells do.
func writeTable(b *strings.Builder, runs []Run, rows []row, unitInLabel bool, cell func(Run, row) string) {
	b.WriteString("| measure |")
	for _, run := range runs {
		fmt.Fprintf(b, " %s nodes / %s pods |", count(run.Nodes), count(run.Pods))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(runs)) + "\n")
	group := ""
	for _, row := range rows {
		if row.group != group {
			group = row.group
			fmt.Fprintf(b, "| **%s** |%s\n", group, strings.Repeat(" |", len(runs)))
		}
		label := row.label
		if unitInLabel && row.unit != "" {
			label += ", " + row.unit
		}
		fmt.Fprintf(b, "| %s |", label)
		for _, run := range runs {
			fmt.Fprintf(b, " %s |", cell(run, row))
		}
		b.WriteString("\n")
	}
}

// beforeAfter is a cell of the before → after table: both values and the unit, or the value
// alone where this run did not change it.
func beforeAfter(run Run, row row) string {
	before, after := row.value(*run.Before), row.value(run)
	unit := ""
	if row.unit != "" && after != none {
		unit = " " + row.unit
	}
	if before == after {
		return after + unit
	}
	return before + " → " + after + unit
}

// differs says whether any compared run reads differently from its baseline in row, where the
// baseline measured row's component: a component only this build was measured on (the baseline
// runs the controller and the plans) is in the first table alone.
func differs(compared []Run, rows []row, row row) bool {
	for _, run := range compared {
		if measured(*run.Before, rows, row.group) && row.value(*run.Before) != row.value(run) {
			return true
		}
	}
	return false
}

// measured says whether run measured anything of group: a value other than "—" or a zero count.
func measured(run Run, rows []row, group string) bool {
	for _, r := range rows {
		if r.group == group && !r.setup {
			if v := r.value(run); v != none && v != "0" {
				return true
			}
		}
	}
	return false
}

// expand replaces the rows that hold several values by their parts.
func expand(rows []row) []row {
	var out []row
	for _, row := range rows {
		if row.parts != nil {
			out = append(out, row.parts...)
		} else {
			out = append(out, row)
		}
	}
	return out
}

// tableRows are the rows of the results table. The plans' rows follow the kinds of DaemonSet
// planned, in the order the runs first name them.
func tableRows(runs []Run) []row {
	rows := []row{
		{group: "cluster", label: "DaemonSets on every node", setup: true, value: func(r Run) string { return count(r.DaemonSets) }},
		{group: "cluster", label: "populated in (start and occupancy)", setup: true, unit: "s", value: func(r Run) string { return seconds(r.PopulateSeconds) }},
		{group: "cluster", label: "measured on", setup: true, value: func(r Run) string { return text(r.Date) }},

		{group: "rollout", label: "budget (maxUnavailable)", setup: true, value: func(r Run) string { return text(r.Rollout.Budget) }},
		{group: "rollout", label: "built-in RollingUpdate", unit: "s", value: func(r Run) string { return seconds(r.Rollout.BuiltinSeconds) }},
		{group: "rollout", label: "managed rollout", unit: "s", value: func(r Run) string { return seconds(r.Rollout.ManagedSeconds) }},
		{group: "rollout", label: "managed / built-in", value: func(r Run) string { return ratio(r.Rollout.ManagedSeconds, r.Rollout.BuiltinSeconds) }},
		rolloutCostRow("DaemonSet controller syncs", "DaemonSet controller syncs", "", func(c RolloutCost) string { return count(c.DaemonSetSyncs) }),
		rolloutCostRow("DaemonSet controller sync time", "DaemonSet controller sync time", "s", func(c RolloutCost) string { return seconds(c.DaemonSetSyncSeconds) }),
		rolloutCostRow("DaemonSet writes (409 conflicts)", "DaemonSet writes (409 conflicts)", "", writes),
		rolloutCostRow("CPU of every process of the machine", "CPU of every process", "s", cpuOf("")),
		rolloutCostRow("of it kube-controller-manager", "CPU of kube-controller-manager", "s", cpuOf("kube-controller")),
		rolloutCostRow("of it daemonguard's controller", "CPU of daemonguard's controller", "s", cpuOf("daemonguard controller")),
		rolloutCostRow("new pods scheduled to Ready, p50", "new pods scheduled to Ready, p50", "s", func(c RolloutCost) string { return seconds(c.ReadyP50Seconds) }),
		rolloutCostRow("new pods scheduled to Ready, p99", "new pods scheduled to Ready, p99", "s", func(c RolloutCost) string { return seconds(c.ReadyP99Seconds) }),
		{group: "rollout", label: "controller peak RSS", unit: "MiB", value: func(r Run) string { return mib(r.Rollout.ControllerPeakRSSMiB) }},
		{group: "rollout", label: "controller CPU, start to the managed rollout's end", unit: "s", value: func(r Run) string { return seconds(r.Rollout.ControllerCPUSeconds) }},

		{group: "webhook", label: "startup to first ready answer", unit: "s", value: func(r Run) string { return seconds(r.Webhook.StartupSeconds) }},
		{group: "webhook", label: "RSS after reviews and join storm", unit: "MiB", value: func(r Run) string { return mib(r.Webhook.RSSMiB) }},
		{group: "webhook", label: "peak RSS", unit: "MiB", value: func(r Run) string { return mib(r.Webhook.PeakRSSMiB) }},
		{group: "webhook", label: "review p50", unit: "ms", value: func(r Run) string { return ms(r.Webhook.ReviewP50Ms) }},
		{group: "webhook", label: "review p99", unit: "ms", value: func(r Run) string { return ms(r.Webhook.ReviewP99Ms) }},
		{group: "webhook", label: "reviews measured", value: func(r Run) string { return count(r.Webhook.Reviews) }},
		{group: "webhook", label: "join storm: nodes, DaemonSet pods, failed, until available", value: joinStorm, parts: []row{
			{group: "webhook", label: "join storm: nodes", value: func(r Run) string { return count(r.Webhook.JoinNodes) }},
			{group: "webhook", label: "join storm: DaemonSet pods", value: func(r Run) string { return count(r.Webhook.JoinPods) }},
			{group: "webhook", label: "join storm: failed", value: func(r Run) string { return count(r.Webhook.JoinFailed) }},
			{group: "webhook", label: "join storm: until available", unit: "s", value: func(r Run) string { return seconds(r.Webhook.JoinSeconds) }},
		}},

		{group: "audit", label: "DaemonSets audited", value: func(r Run) string { return audited(r, r.Audit.DaemonSets) }},
		{group: "audit", label: "audit", unit: "s", value: func(r Run) string { return seconds(r.Audit.Seconds) }},
		{group: "audit", label: "peak RSS of its webhook replica", unit: "MiB", value: func(r Run) string { return mib(r.Audit.PeakRSSMiB) }},
		{group: "audit", label: "Events", value: func(r Run) string { return audited(r, r.Audit.Events) }},
		{group: "audit", label: "Reports", value: func(r Run) string { return audited(r, r.Audit.Reports) }},
		{group: "audit", label: "largest report (etcd's limit: 1,536)", unit: "KiB", value: func(r Run) string { return kib(r.Audit.LargestReportBytes) }},
	}
	for _, kind := range planKinds(runs) {
		plan := func(r Run) (Plan, bool) {
			for _, p := range r.Plans {
				if p.DaemonSet == kind {
					return p, true
				}
			}
			return Plan{}, false
		}
		rows = append(rows,
			row{group: "pre-flight plan", label: kind + ": wall time", unit: "s", value: func(r Run) string {
				p, ok := plan(r)
				return orNone(ok, func() string { return seconds(p.WallSeconds) })
			}},
			row{group: "pre-flight plan", label: kind + ": CPU, the plan / the API server", unit: "s", value: func(r Run) string {
				p, ok := plan(r)
				return orNone(ok && p.CPUSeconds != 0, func() string { return seconds(p.CPUSeconds) + " / " + seconds(p.APIServerCPUSeconds) })
			}, parts: []row{
				{group: "pre-flight plan", label: kind + ": CPU of the plan", unit: "s", value: func(r Run) string {
					p, ok := plan(r)
					return orNone(ok && p.CPUSeconds != 0, func() string { return seconds(p.CPUSeconds) })
				}},
				{group: "pre-flight plan", label: kind + ": CPU of the API server", unit: "s", value: func(r Run) string {
					p, ok := plan(r)
					return orNone(ok && p.CPUSeconds != 0, func() string { return seconds(p.APIServerCPUSeconds) })
				}},
			}},
			row{group: "pre-flight plan", label: kind + ": API requests", value: func(r Run) string {
				p, ok := plan(r)
				return orNone(ok, func() string { return count(p.Requests) })
			}},
			row{group: "pre-flight plan", label: kind + ": peak RSS", unit: "MiB", value: func(r Run) string {
				p, ok := plan(r)
				return orNone(ok, func() string { return mib(p.PeakRSSMiB) })
			}},
		)
	}
	return rows
}

// planKinds are the kinds of DaemonSet the runs planned, baselines included, in the order they
// first appear.
func planKinds(runs []Run) []string {
	var kinds []string
	seen := map[string]bool{}
	var add func(Run)
	add = func(r Run) {
		for _, p := range r.Plans {
			if !seen[p.DaemonSet] {
				seen[p.DaemonSet] = true
				kinds = append(kinds, p.DaemonSet)
			}
		}
		if r.Before != nil {
			add(*r.Before)
		}
	}
	for _, r := range runs {
		add(r)
	}
	return kinds
}

// joinStorm reads the join storm in one cell: "500 nodes, 2,000 pods, 0 failed, 41.2 s".
func joinStorm(r Run) string {
	w := r.Webhook
	if w.JoinNodes == 0 {
		return none
	}
	return fmt.Sprintf("%s nodes, %s pods, %s failed, %s s", count(w.JoinNodes), count(w.JoinPods), count(w.JoinFailed), seconds(w.JoinSeconds))
}

// builtin and managed pick one rollout's cost.
func builtin(r Rollout) RolloutCost { return r.Builtin }
func managed(r Rollout) RolloutCost { return r.Managed }

// costOf reads one rollout's cost, "—" for a run that did not measure it.
func costOf(of func(Rollout) RolloutCost, value func(RolloutCost) string) func(Run) string {
	return func(r Run) string {
		c := of(r.Rollout)
		return orNone(c.DaemonSetSyncs != 0, func() string { return value(c) })
	}
}

// rolloutCostRow is the row of a cost of both rollouts, "label, built-in / managed", whose
// before → after table has a row per rollout, "part, built-in" and "part, managed".
func rolloutCostRow(label, part, unit string, value func(RolloutCost) string) row {
	return row{group: "rollout", label: label + ", built-in / managed", unit: unit, value: bothRollouts(value), parts: []row{
		{group: "rollout", label: part + ", built-in", unit: unit, value: costOf(builtin, value)},
		{group: "rollout", label: part + ", managed", unit: unit, value: costOf(managed, value)},
	}}
}

// bothRollouts reads a cost of both rollouts in one cell: "812 / 1,544".
func bothRollouts(value func(RolloutCost) string) func(Run) string {
	return func(r Run) string {
		b, m := costOf(builtin, value)(r), costOf(managed, value)(r)
		if b == none && m == none {
			return none
		}
		return b + " / " + m
	}
}

// cpuOf reads the CPU seconds of the process named (as /proc/PID/comm names it), of every process
// when name is "".
func cpuOf(name string) func(RolloutCost) string {
	return func(c RolloutCost) string {
		if c.CPUSeconds == nil {
			return none
		}
		if name != "" {
			v, ok := c.CPUSeconds[name]
			return orNone(ok, func() string { return seconds(v) })
		}
		total := 0.0
		for _, v := range c.CPUSeconds {
			total += v
		}
		return seconds(total)
	}
}

func writes(c RolloutCost) string {
	return fmt.Sprintf("%s (%s)", count(c.DaemonSetWrites), count(c.Conflicts))
}

// audited reads a count of the audit's, "—" when the run did not measure the audit (a run
// stopped before it), where a count of 0 would read as measured.
func audited(r Run, n int) string {
	return orNone(r.Audit.Seconds != 0, func() string { return count(n) })
}

func orNone(ok bool, value func() string) string {
	if !ok {
		return none
	}
	return value()
}

func text(s string) string {
	if s == "" {
		return none
	}
	return s
}

// seconds reads a duration to the hundredth below a second (a plan of a RollingUpdate DaemonSet
// takes 0.65 s), to a tenth below 100 s and to the second above, where a tenth is noise. Zero is
// a duration not measured: nothing the benchmark times takes no time at all.
func seconds(v float64) string {
	switch a := math.Abs(v); {
	case v == 0:
		return none
	case a < 0.995: // from 0.995 it would read "1.00"
		return number(v, 2)
	case a < 99.95: // from 99.95 it would read "100.0"
		return number(v, 1)
	default:
		return number(v, 0)
	}
}

// mib reads memory to the MiB; zero is memory not measured.
func mib(v float64) string {
	if v == 0 {
		return none
	}
	return number(v, 0)
}

// ms reads a latency to a tenth of a millisecond; zero is a latency not measured.
func ms(v float64) string {
	if v == 0 {
		return none
	}
	return number(v, 1)
}

// kib reads a size in KiB, to a tenth below 100 KiB. Zero bytes is no report written.
func kib(bytes int) string {
	if bytes == 0 {
		return none
	}
	v := float64(bytes) / 1024
	if v >= 99.95 {
		return number(v, 0)
	}
	return number(v, 1)
}

// ratio reads a/b as "1.23x", or "—" when either was not measured.
func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return none
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "x"
}

// count reads a count with thousands separators.
func count(n int) string {
	return number(float64(n), 0)
}

// number formats v with decimals digits after the point and a comma between thousands.
func number(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	var b strings.Builder
	for i, d := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if hasFrac {
		b.WriteString("." + frac)
	}
	if sign == "-" && strings.Trim(b.String(), "0.,") == "" {
		sign = "" // -0.04 rounds to "0.0", not "-0.0"
	}
	return sign + b.String()
}
