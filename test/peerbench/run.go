package peerbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/loadgen"
	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Nodes is the size of the cluster daemonguard's cluster facts describe, as loadgen's default.
const Nodes = 5

// Run builds (or finds) Gatekeeper, starts a local control plane without nodes, Gatekeeper, the
// null webhook and daemonguard, and measures every target at every rate. The executable must call
// loadgen.ServeChildIfAsked first: the null webhook and daemonguard run as children of it.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	bins, err := toolbin.Ensure(ctx, progress, toolbin.GatekeeperBinary, toolbin.GatekeeperManifests)
	if err != nil {
		return nil, err
	}
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: []localcluster.Node{}, Log: progress})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			c.Stop()
			return
		}
		c.StopKeepLogs() // Gatekeeper's log is among them
		fmt.Fprintf(progress, "Kept the cluster's logs, Gatekeeper's too, in %s\n", filepath.Join(c.Dir, "logs"))
	}()
	gk, err := startGatekeeper(ctx, c, bins, cfg.MaxProcs, progress)
	if err != nil {
		return nil, err
	}
	defer gk.stop()
	servers, err := loadgen.StartServerProcesses(ctx, loadgen.ServerOptions{Nodes: Nodes, MaxProcs: cfg.MaxProcs}, "")
	if err != nil {
		return nil, err
	}
	defer servers.Close()
	pool := servers.RootCAs.Clone()
	if !pool.AppendCertsFromPEM(gk.certPEM) {
		return nil, fmt.Errorf("add Gatekeeper's certificate to the client's pool: it does not parse")
	}
	rep, err := drive(ctx, cfg, []*loadgen.Target{servers.Null, gk.target, servers.Daemonguard}, func() *http.Client { return loadgen.NewClient(pool, true) }, progress)
	if err != nil {
		return nil, err
	}
	rep.GatekeeperVersion = gk.version
	return rep, nil
}

// paths are the validating webhooks of the targets.
var paths = map[string]string{
	loadgen.Null:        fixture.ValidateDaemonSetPath,
	loadgen.Daemonguard: fixture.ValidateDaemonSetPath,
	Gatekeeper:          gatekeeperPath,
}

// drive runs the warm-up and the steps: per rate every target once, back to back, the first
// target of a rate the second of the rate before, so no target always runs first.
func drive(ctx context.Context, cfg Config, targets []*loadgen.Target, newClient func() *http.Client, progress io.Writer) (*Report, error) {
	base, err := reviewCases()
	if err != nil {
		return nil, err
	}
	rep := &Report{Rates: cfg.Rates, Duration: cfg.Duration, MaxProcs: cfg.MaxProcs, CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	for _, t := range targets {
		rep.Targets = append(rep.Targets, t.Name)
	}
	clients := map[string]*http.Client{}
	for _, t := range targets {
		clients[t.Name] = newClient()
		defer clients[t.Name].CloseIdleConnections()
	}
	id := uint32(cfg.Seed << 16)
	step := func(t *loadgen.Target, rate int, d time.Duration) (Result, error) {
		id++
		cases := slices.Clone(base)
		for i := range cases {
			cases[i].Path = paths[t.Name]
		}
		seq := make([]int, loadgen.Requests(rate, d)) // every review the one case, each with its own object
		runtime.GC()                                  // the generator's garbage, not the target's
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-time.After(cfg.Pause):
		}
		u0, err := readUsage(t.PID)
		if err != nil {
			return Result{}, err
		}
		r := loadgen.RunStep(ctx, clients[t.Name], t, loadgen.StepSpec{Rate: rate, Timeout: cfg.Timeout, MaxInFlight: cfg.MaxInFlight, ID: id}, cases, seq)
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		u1, err := readUsage(t.PID)
		if err != nil {
			return Result{}, err
		}
		res := Result{Target: t.Name, Rate: rate, Sent: r.Sent, Errors: r.Errors, P50: r.P50, P90: r.P90, P99: r.P99, Max: r.Max, RSS: u1.RSS, ErrorSamples: r.ErrorSamples}
		if r.Sent > 0 {
			res.CPUPerReview = (u1.CPU - u0.CPU) / time.Duration(r.Sent)
		}
		return res, nil
	}
	if cfg.Warmup > 0 {
		warm := slices.Min(cfg.Rates)
		for _, t := range targets {
			fmt.Fprintf(progress, "warm-up: %s at %d/s for %v\n", t.Name, warm, cfg.Warmup)
			if _, err := step(t, warm, cfg.Warmup); err != nil {
				return nil, err
			}
		}
	}
	for k, rate := range cfg.Rates {
		for j := range targets {
			t := targets[(j+k)%len(targets)]
			fmt.Fprintf(progress, "%s at %d/s for %v ... ", t.Name, rate, cfg.Duration)
			r, err := step(t, rate, cfg.Duration)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(progress, "%d errors of %d, p50 %v, p99 %v\n", r.Errors, r.Sent, r.P50, r.P99)
			rep.Results = append(rep.Results, r)
		}
	}
	return rep, nil
}
