// Package peerbench measures daemonguard's validating webhook against its peers in one run on one
// machine: a null webhook (decodes the review and allows), Gatekeeper (a pinned release built from
// tools/gatekeeper, with one ConstraintTemplate of the meaning of daemonguard's
// rolling_update_budget policy, testdata/daemonset-budget.yaml) and daemonguard with its built-in
// policies. Each webhook runs in a process of its own on loopback; Gatekeeper reads its templates
// and constraints from a local control plane (test/localcluster), as it does in a cluster.
//
// The load is test/loadgen's: open loop at fixed rates, the same stream of new DaemonSet reviews
// (fixture's validate-daemonset/create, every object unique) for every target, over HTTPS with
// HTTP/1.1 keep-alive connections. For each rate the three targets run back to back, the order
// rotating from rate to rate, so that all three see the same machine. Per step it reports
// p50/p90/p99/max latency, CPU time per review and resident memory of the target's process, read
// from /proc, the same way for all three. `make bench-peers` runs it (cmd/peerbench); results are
// in docs/performance.md.
package peerbench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is one run.
type Config struct {
	Rates       []int         // reviews per second, one step per rate and target
	Duration    time.Duration // of each step
	Warmup      time.Duration // per target, at the lowest rate, not recorded; 0 skips it
	Pause       time.Duration // between steps
	Timeout     time.Duration // per review, from its due time
	MaxInFlight int           // reviews in flight per target, as the API server caps them
	// MaxProcs, when positive, is the GOMAXPROCS of every webhook process: 1 measures what one
	// core serves.
	MaxProcs int
	Seed     uint64 // of the review UIDs' sequence
	Progress io.Writer
}

// Bounds on a run, so a typo cannot start an hour of load or a rate the generator cannot pace.
const (
	maxRate     = 20_000
	maxDuration = 10 * time.Minute
	maxRates    = 10
)

// DefaultConfig is 250, 500 and 1,000 reviews/s for 10 s each, after a 3 s warm-up.
func DefaultConfig() Config {
	return Config{
		Rates: []int{250, 500, 1000}, Duration: 10 * time.Second, Warmup: 3 * time.Second, Pause: time.Second,
		Timeout: 10 * time.Second, MaxInFlight: 256, Seed: 1,
	}
}

// ParseFlags reads a run's configuration from command-line arguments (`make bench-peers
// BENCH_FLAGS=...`), starting from DefaultConfig; usage and errors go to out.
func ParseFlags(args []string, out io.Writer) (Config, error) {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("peerbench", flag.ContinueOnError)
	fs.SetOutput(out)
	rates := fs.String("rates", joinInts(cfg.Rates), "reviews per second to step through, comma-separated")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "duration of each step (one target at one rate)")
	fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unrecorded warm-up per target at the lowest rate; 0 skips it")
	fs.DurationVar(&cfg.Pause, "pause", cfg.Pause, "pause between steps")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-review timeout, from its due time")
	fs.IntVar(&cfg.MaxInFlight, "max-inflight", cfg.MaxInFlight, "most reviews in flight per target; later ones wait, and the wait counts")
	fs.IntVar(&cfg.MaxProcs, "server-procs", cfg.MaxProcs, "GOMAXPROCS of every webhook process (1: one core each); 0 leaves the Go default")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the run")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if cfg.Rates, err = parseRates(*rates); err != nil {
		return Config{}, fmt.Errorf("-rates: %w", err)
	}
	return cfg, cfg.validate()
}

// parseRates parses "250,500,1000".
func parseRates(s string) ([]int, error) {
	var rates []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		r, err := strconv.Atoi(part)
		if err != nil {
			return nil, fmt.Errorf("%q is not an integer", part)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// validate checks the bounds of a run before any work starts.
func (c Config) validate() error {
	var errs []error
	if len(c.Rates) == 0 || len(c.Rates) > maxRates {
		errs = append(errs, fmt.Errorf("%d rates, want 1 to %d", len(c.Rates), maxRates))
	}
	for i, r := range c.Rates {
		if r <= 0 || r > maxRate {
			errs = append(errs, fmt.Errorf("rate %d is outside 1 to %d reviews/s", r, maxRate))
		}
		if slices.Contains(c.Rates[:i], r) {
			errs = append(errs, fmt.Errorf("rate %d is given twice", r))
		}
	}
	if c.Duration <= 0 || c.Duration > maxDuration {
		errs = append(errs, fmt.Errorf("duration %v is outside (0, %v]", c.Duration, maxDuration))
	}
	if c.Warmup < 0 || c.Warmup > maxDuration || c.Pause < 0 || c.Pause > time.Minute {
		errs = append(errs, fmt.Errorf("warm-up %v or pause %v is negative or too long", c.Warmup, c.Pause))
	}
	if c.Timeout <= 0 || c.Timeout > time.Minute {
		errs = append(errs, fmt.Errorf("timeout %v is outside (0, 1m]", c.Timeout))
	}
	if c.MaxInFlight <= 0 || c.MaxInFlight > 10_000 {
		errs = append(errs, fmt.Errorf("max in flight %d is outside 1 to 10000", c.MaxInFlight))
	}
	if c.MaxProcs < 0 || c.MaxProcs > 1024 {
		errs = append(errs, fmt.Errorf("server GOMAXPROCS %d is outside 0 to 1024", c.MaxProcs))
	}
	return errors.Join(errs...)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
