package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Goal is the project's latency target: daemonguard within P50 times the null webhook's median and
// P99 times its 99th percentile.
type Goal struct{ P50, P99 float64 }

// DefaultGoal is 1.25x at p50 and 1.5x at p99.
var DefaultGoal = Goal{P50: 1.25, P99: 1.5}

// RatioRow compares daemonguard with the null webhook at one rate, in one round or (Round 0) as
// the median over all rounds.
type RatioRow struct {
	Round  int     `json:"round"`
	Rate   int     `json:"rate"`
	P50    float64 `json:"p50Ratio"`
	P99    float64 `json:"p99Ratio"`
	P50Met bool    `json:"p50GoalMet"`
	P99Met bool    `json:"p99GoalMet"`
	Errors int     `json:"errors"` // of both targets at this rate
}

// Ratios returns daemonguard/null at every rate both were measured at, round by round, in the
// run's order.
func (r *Report) Ratios(goal Goal) []RatioRow {
	var out []RatioRow
	for round := 1; round <= max(r.Config.Rounds, 1); round++ {
		for _, rate := range r.Config.Rates {
			var null, dg *Result
			for i := range r.Results {
				res := &r.Results[i]
				if res.Rate != rate || max(res.Round, 1) != round {
					continue
				}
				switch res.Target {
				case Null:
					null = res
				case Daemonguard:
					dg = res
				}
			}
			if null == nil || dg == nil {
				continue
			}
			row := RatioRow{Round: round, Rate: rate, P50: Ratio(dg.P50, null.P50), P99: Ratio(dg.P99, null.P99), Errors: null.Errors + dg.Errors}
			row.P50Met = row.P50 <= goal.P50 && row.Errors == 0
			row.P99Met = row.P99 <= goal.P99 && row.Errors == 0
			out = append(out, row)
		}
	}
	return out
}

// MedianRatios returns, per rate, the median over rounds of the p50 and p99 ratios (Round 0),
// with the errors of all rounds. With an even number of rounds the median is the mean of the two
// middle ratios.
func (r *Report) MedianRatios(goal Goal) []RatioRow {
	byRate := map[int][]RatioRow{}
	for _, row := range r.Ratios(goal) {
		byRate[row.Rate] = append(byRate[row.Rate], row)
	}
	var out []RatioRow
	for _, rate := range r.Config.Rates {
		rows := byRate[rate]
		if len(rows) == 0 {
			continue
		}
		m := RatioRow{Rate: rate}
		var p50, p99 []float64
		for _, row := range rows {
			p50, p99 = append(p50, row.P50), append(p99, row.P99)
			m.Errors += row.Errors
		}
		m.P50, m.P99 = median(p50), median(p99)
		m.P50Met = m.P50 <= goal.P50 && m.Errors == 0
		m.P99Met = m.P99 <= goal.P99 && m.Errors == 0
		out = append(out, m)
	}
	return out
}

// median of xs; NaN (a ratio that could not be formed) if any is, so a failed round is not hidden.
func median(xs []float64) float64 {
	if slices.ContainsFunc(xs, math.IsNaN) {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// WriteJSON writes the report and its ratios as one JSON document (durations in nanoseconds).
func (r *Report) WriteJSON(w io.Writer, goal Goal) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		*Report
		Goal         Goal       `json:"goal"`
		Ratios       []RatioRow `json:"ratios"`
		MedianRatios []RatioRow `json:"medianRatios"`
	}{r, goal, r.Ratios(goal), r.MedianRatios(goal)})
}

// WriteMarkdown writes the results and the ratio tables.
func (r *Report) WriteMarkdown(w io.Writer, goal Goal) error {
	c := r.Config
	var b strings.Builder
	where := "each server in a process of its own, the generator in another"
	processFootnote := "CPU/req is the CPU time (GC included) of the target's server process per request, alloc/req the heap it allocated per request, and GCs the collections it ran during the step (the generator's own figures are in the JSON report)."
	if c.Processes != OwnProcesses {
		where = "servers and generator in one process"
		processFootnote = "CPU/req is the whole process's CPU time (servers, generator, GC) per request, alloc/req the heap it allocated per request, and GCs the collections it ran during the step."
	}
	fmt.Fprintf(&b, "Open loop, %v per step, %s over TLS on loopback, %s, at most %d requests in flight, timeout %v, mix %s, cluster facts of %d nodes, %s DaemonSet objects; %s, %d CPUs, GOMAXPROCS %d (servers: %s).\n\n",
		c.Duration, c.Protocol, where, c.MaxInFlight, c.Timeout, c.Mix, c.Nodes, c.Objects, c.GoVersion, c.CPUs, c.MaxProcs, serverProcs(c.ServerMaxProcs))
	b.WriteString("| round | rate/s | target | sent | ok | errors | achieved/s | p50 | p90 | p99 | max | send lag p99 | CPU/req | alloc/req KB | GCs |\n")
	b.WriteString("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range r.Results {
		fmt.Fprintf(&b, "| %d | %d | %s | %d | %d | %d | %.0f | %s | %s | %s | %s | %s | %s | %.1f | %d |\n",
			max(x.Round, 1), x.Rate, x.Target, x.Sent, x.OK, x.Errors, x.Achieved, ms(x.P50), ms(x.P90), ms(x.P99), ms(x.Max), ms(x.SendLagP99), ms(x.CPUPerRequest),
			float64(x.AllocPerRequest)/1024, x.GCCycles)
	}
	b.WriteString("\nLatencies in ms from each request's scheduled send time; " + processFootnote + "\n\n")
	writeRatios := func(rows []RatioRow, first string) {
		fmt.Fprintf(&b, "| %s | rate/s | p50 daemonguard/null | p99 daemonguard/null | goal (p50 <= %.2fx, p99 <= %.2fx) |\n", first, goal.P50, goal.P99)
		b.WriteString("|---|---:|---:|---:|---|\n")
		for _, x := range rows {
			verdict := "met"
			switch {
			case x.Errors > 0:
				verdict = fmt.Sprintf("not met (errors: %d)", x.Errors)
			case !x.P50Met && !x.P99Met:
				verdict = "not met (p50 and p99)"
			case !x.P50Met:
				verdict = "not met (p50)"
			case !x.P99Met:
				verdict = "not met (p99)"
			}
			label := "median"
			if x.Round > 0 {
				label = fmt.Sprint(x.Round)
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", label, x.Rate, ratio(x.P50), ratio(x.P99), verdict)
		}
	}
	writeRatios(r.Ratios(goal), "round")
	if max(c.Rounds, 1) > 1 {
		fmt.Fprintf(&b, "\nMedian over the %d rounds:\n\n", c.Rounds)
		writeRatios(r.MedianRatios(goal), "over")
	}
	for _, x := range r.Results {
		for _, s := range x.ErrorSamples {
			fmt.Fprintf(&b, "\nerror sample (%s at %d/s): %s", x.Target, x.Rate, s)
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}

func ratio(f float64) string {
	if math.IsNaN(f) {
		return "-"
	}
	return fmt.Sprintf("%.2fx", f)
}

func serverProcs(n int) string {
	if n <= 0 {
		return "as the machine"
	}
	return strconv.Itoa(n)
}
