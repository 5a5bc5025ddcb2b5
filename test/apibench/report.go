// Package apibench measures what daemonguard's admission webhooks add to DaemonSet writes as a
// client sees them through the real kube-apiserver: open-loop CREATEs of new DaemonSets and
// UPDATEs of stored ones at fixed rates, once without daemonguard and once with its webhooks
// registered, on the local control plane. It reports client-side latency percentiles and the API
// server's own apiserver_admission_webhook_admission_duration_seconds. See docs/performance.md.
package apibench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

// Setups compared by a run.
const (
	NoDaemonguard = "none"
	NullWebhook   = "null"
	Daemonguard   = "daemonguard"
)

// Step is one setup, rate and operation of a run.
type Step struct {
	Setup     string        `json:"setup"`
	Rate      int           `json:"rate"` // writes/s of both operations together
	Operation string        `json:"operation"`
	Sent      int           `json:"sent"`
	Errors    int           `json:"errors"`
	FirstErr  string        `json:"firstError,omitempty"`
	P50       time.Duration `json:"p50"`
	P99       time.Duration `json:"p99"`
	// Webhooks is what the API server measured per webhook during the step, by webhook name.
	Webhooks map[string]WebhookLatency `json:"webhooks,omitempty"`
}

// WebhookLatency summarises one webhook's apiserver_admission_webhook_admission_duration_seconds
// over a step: the exact mean, and the histogram's upper bucket bound below which 50% and 99% of
// the calls fell (the API server's buckets are coarse: 5 ms, 25 ms, 100 ms, ...).
type WebhookLatency struct {
	Calls  uint64        `json:"calls"`
	Mean   time.Duration `json:"mean"`
	P50Max time.Duration `json:"p50UpperBound"`
	P99Max time.Duration `json:"p99UpperBound"`
}

// Report is a whole run.
type Report struct {
	Rates    []int         `json:"rates"`
	Duration time.Duration `json:"duration"`
	Nodes    int           `json:"nodes"`
	Steps    []Step        `json:"steps"`
}

// summarise fills the step's latency percentiles from its samples.
func (s *Step) summarise(latencies []time.Duration) {
	sorted := slices.Clone(latencies)
	slices.Sort(sorted)
	s.P50, s.P99 = loadgen.Percentile(sorted, 50), loadgen.Percentile(sorted, 99)
}

// find returns the step of setup, rate and operation, or nil.
func (r *Report) find(setup string, rate int, op string) *Step {
	for i := range r.Steps {
		if s := &r.Steps[i]; s.Setup == setup && s.Rate == rate && s.Operation == op {
			return s
		}
	}
	return nil
}

// WriteMarkdown writes the comparison table: per rate and operation, client-side p50 and p99
// without webhooks, with the null webhook and with daemonguard, what daemonguard adds to no
// webhook and to the null webhook, and what the API server measured of each of daemonguard's
// webhooks.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Open loop through kube-apiserver on the local control plane (%d nodes), %v per step, creates and updates alternating, every object new to the webhook.\n\n", r.Nodes, r.Duration)
	b.WriteString("| writes/s | op | sent | errors (none / null / dg) | p50 none / null / daemonguard | added p50 vs none / vs null | p99 none / null / daemonguard | added p99 vs none / vs null | API server: daemonguard webhook mean (p99 bucket) |\n")
	b.WriteString("|---:|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, rate := range r.Rates {
		for _, op := range []string{"CREATE", "UPDATE"} {
			none, null, dg := r.find(NoDaemonguard, rate, op), r.find(NullWebhook, rate, op), r.find(Daemonguard, rate, op)
			if none == nil || null == nil || dg == nil {
				continue
			}
			fmt.Fprintf(&b, "| %d | %s | %d | %d / %d / %d | %s / %s / %s | %s / %s | %s / %s / %s | %s / %s | %s |\n", rate, op, dg.Sent, none.Errors, null.Errors, dg.Errors,
				ms(none.P50), ms(null.P50), ms(dg.P50), ms(dg.P50-none.P50), ms(dg.P50-null.P50),
				ms(none.P99), ms(null.P99), ms(dg.P99), ms(dg.P99-none.P99), ms(dg.P99-null.P99), webhookCell(dg.Webhooks))
		}
	}
	for _, s := range r.Steps {
		if s.FirstErr != "" {
			fmt.Fprintf(&b, "\n%s at %d/s, %s: first error: %s\n", s.Setup, s.Rate, s.Operation, s.FirstErr)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func webhookCell(hooks map[string]WebhookLatency) string {
	names := make([]string, 0, len(hooks))
	for name := range hooks {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, name := range names {
		h := hooks[name]
		parts = append(parts, fmt.Sprintf("%s %s (≤%s)", strings.SplitN(name, ".", 3)[1], ms(h.Mean), ms(h.P99Max)))
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
