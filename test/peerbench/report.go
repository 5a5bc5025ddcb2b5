package peerbench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

// Result is one step: one target at one rate.
type Result struct {
	Target string
	Rate   int
	Sent   int
	Errors int // reviews not answered 200, allowed, with their UID, within the timeout
	// Latency from each review's due time to the end of its response; a failed review counts.
	P50, P90, P99, Max time.Duration
	// CPUPerReview is the CPU time (user + system) the target's process used during the step,
	// per review sent.
	CPUPerReview time.Duration
	RSS          int64 // resident memory of the target's process at the end of the step, bytes
	// ErrorSamples are the first few failures, for the report.
	ErrorSamples []string
}

// Report is a whole run.
type Report struct {
	Rates             []int
	Targets           []string // in the order of the report's rows
	Duration          time.Duration
	MaxProcs          int // the webhooks' GOMAXPROCS, 0 for the Go default
	CPUs              int
	GoVersion         string
	GatekeeperVersion string
	Results           []Result
}

// result returns the step of target at rate, or nil.
func (r *Report) result(target string, rate int) *Result {
	for i := range r.Results {
		if r.Results[i].Target == target && r.Results[i].Rate == rate {
			return &r.Results[i]
		}
	}
	return nil
}

// WriteMarkdown writes the report as Markdown: one table of every step, then daemonguard's p99
// over Gatekeeper's and the null webhook's per rate, then any errors.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	procs := "the Go default GOMAXPROCS"
	if r.MaxProcs > 0 {
		procs = fmt.Sprintf("GOMAXPROCS=%d", r.MaxProcs)
	}
	fmt.Fprintf(&b, "Validating webhooks, new DaemonSet reviews, open loop, %v per step, %d CPUs, webhooks with %s, %s, Gatekeeper %s.\n\n",
		r.Duration, r.CPUs, procs, r.GoVersion, r.GatekeeperVersion)
	b.WriteString("| reviews/s | target | reviews | errors | p50 | p90 | p99 | max | CPU/review | RSS |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, rate := range r.Rates {
		for _, t := range r.Targets {
			res := r.result(t, rate)
			if res == nil {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s |\n",
				thousands(rate), t, thousands(res.Sent), res.Errors, millis(res.P50), millis(res.P90), millis(res.P99), millis(res.Max),
				micros(res.CPUPerReview), mebibytes(res.RSS))
		}
	}
	b.WriteString("\n| reviews/s | daemonguard/Gatekeeper p50 | daemonguard/Gatekeeper p99 | daemonguard/null p99 |\n|---:|---:|---:|---:|\n")
	for _, rate := range r.Rates {
		dg, gk, null := r.result(loadgen.Daemonguard, rate), r.result(Gatekeeper, rate), r.result(loadgen.Null, rate)
		if dg == nil {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", thousands(rate), ratio(dg, gk, func(r *Result) time.Duration { return r.P50 }),
			ratio(dg, gk, p99), ratio(dg, null, p99))
	}
	for _, res := range r.Results {
		for _, s := range res.ErrorSamples {
			fmt.Fprintf(&b, "\n%s at %d/s: %s\n", res.Target, res.Rate, s)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func p99(r *Result) time.Duration { return r.P99 }

// ratio formats of(a)/of(b) as "0.85×", or "–" when b is missing or zero.
func ratio(a, b *Result, of func(*Result) time.Duration) string {
	if b == nil || of(b) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", loadgen.Ratio(of(a), of(b)))
}

// millis formats d in milliseconds with two decimals: "1.52 ms".
func millis(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// micros formats d in whole microseconds: "312 µs".
func micros(d time.Duration) string {
	return fmt.Sprintf("%d µs", int64(math.Round(float64(d)/float64(time.Microsecond))))
}

// mebibytes formats n bytes in whole MiB: "45 MiB".
func mebibytes(n int64) string {
	return fmt.Sprintf("%d MiB", int64(math.Round(float64(n)/(1<<20))))
}

// thousands formats n with a comma between thousands: "1,000".
func thousands(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
