// Command loadgen drives daemonguard's admission webhooks and a null webhook, each served over TLS
// on 127.0.0.1 by a process of its own that loadgen starts (or both in loadgen's own process, with
// -servers in-process), open loop at fixed rates, and prints latency percentiles and the
// daemonguard/null ratios as Markdown (or JSON). See docs/performance.md.
//
//	go run ./cmd/loadgen -rates 500,1000,2000 -duration 10s
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

func main() {
	loadgen.ServeChildIfAsked() // a server process this command started: serves, never returns
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := loadgen.DefaultConfig()
	rates := flag.String("rates", "500,1000,2000", "request rates to step through, requests/s, comma-separated")
	mix := flag.String("mix", cfg.Mix.String(), "share of requests per endpoint (mutate-daemonset, validate-daemonset, mutate-pod)")
	asJSON := flag.Bool("json", false, "print the report as JSON instead of Markdown")
	processes := flag.String("servers", loadgen.InProcess, "where the servers run: "+loadgen.OwnProcesses+" (each in a child process, as a webhook runs in its own pod) or "+loadgen.InProcess+" (with the generator, sharing its CPUs and heap)")
	cpuProfile := flag.String("cpuprofile", "", "write CPU profiles of the run: the generator's to this file, each server process's to FILE.null and FILE.daemonguard; with -servers in-process one profile of everything, handlers labelled by server (go tool pprof -tagfocus target=daemonguard)")
	goal := loadgen.DefaultGoal
	flag.DurationVar(&cfg.Duration, "duration", cfg.Duration, "duration of each step (one target at one rate)")
	flag.IntVar(&cfg.Rounds, "rounds", 1, "repeat the sweep of rates this many times; with more than one, the report adds the median ratios over rounds")
	flag.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "per-request timeout, from the request's scheduled time")
	flag.IntVar(&cfg.MaxInFlight, "max-inflight", cfg.MaxInFlight, "most requests in flight per target, like the API server's concurrency limit; later ones wait (and the wait counts)")
	flag.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unrecorded warm-up per target at the lowest rate; 0 skips it")
	flag.DurationVar(&cfg.Pause, "pause", cfg.Pause, "pause between steps")
	flag.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "number of nodes in the cluster facts daemonguard reads per request")
	flag.BoolVar(&cfg.HTTP1, "http1", false, "use HTTP/1.1 keep-alive connections instead of HTTP/2 (daemonguard's default: without it the servers offer HTTP/2 as daemonguard does with --enable-http2)")
	flag.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the request sequence")
	flag.BoolVar(&cfg.UniqueObjects, "unique-objects", true, "give every DaemonSet request an object not sent before, as distinct writes do (false: repeat the same objects)")
	serverProcs := flag.Int("server-procs", 0, "GOMAXPROCS of each server process with -servers "+loadgen.OwnProcesses+" (1: what a webhook replica serves with one core); 0 leaves the Go default")
	flag.Float64Var(&goal.P50, "goal-p50", goal.P50, "goal: largest acceptable p50 ratio daemonguard/null")
	flag.Float64Var(&goal.P99, "goal-p99", goal.P99, "goal: largest acceptable p99 ratio daemonguard/null")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	cfg.Rates = nil
	for s := range strings.SplitSeq(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r <= 0 {
			return fmt.Errorf("-rates: %q is not a positive integer", s)
		}
		cfg.Rates = append(cfg.Rates, r)
	}
	m, err := loadgen.ParseMix(*mix)
	if err != nil {
		return fmt.Errorf("-mix: %w", err)
	}
	cfg.Mix = m
	cfg.Progress = os.Stderr

	log := loadgen.SetWebhookLogging()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := loadgen.ServerOptions{Nodes: cfg.Nodes, MaxProcs: *serverProcs, HTTP2: !cfg.HTTP1}
	var servers *loadgen.Servers
	switch *processes {
	case loadgen.OwnProcesses:
		servers, err = loadgen.StartServerProcesses(ctx, opts, *cpuProfile)
	case loadgen.InProcess:
		if opts.MaxProcs > 0 {
			return fmt.Errorf("-server-procs needs -servers %s", loadgen.OwnProcesses)
		}
		opts.ProfileLabels = *cpuProfile != ""
		servers, err = loadgen.StartServers(ctx, opts, log)
	default:
		err = fmt.Errorf("-servers: %q is neither %s nor %s", *processes, loadgen.OwnProcesses, loadgen.InProcess)
	}
	if err != nil {
		return err
	}
	defer servers.Close()
	fmt.Fprintf(os.Stderr, "null webhook at %s, daemonguard at %s\n", servers.Null.URL, servers.Daemonguard.URL)
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := loadgen.Run(ctx, cfg, servers)
	if err != nil {
		return err
	}
	if *asJSON {
		return rep.WriteJSON(os.Stdout, goal)
	}
	return rep.WriteMarkdown(os.Stdout, goal)
}
