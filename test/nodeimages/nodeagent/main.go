// Command node-agent is the program of the node-agent images (see package nodeimages): a small,
// realistic node agent for the DaemonSets that tests and the demo run on a real node. It serves
// HTTP (GET /healthz for liveness, /readyz for readiness, /version, and /metrics: the records it
// handled and failed, as a log shipper reports them, at an error ratio a setting controls, so a
// rollout can be gated on what the real container reports), logs the node it runs on,
// writes no file (so it runs with a read-only root filesystem) and stops cleanly on SIGTERM.
// With a crash delay it exits 1 that long after start, so the kubelet puts it into
// CrashLoopBackOff.
//
// It imports only the standard library: nodeimages keys its image cache by this folder's files
// and the Go version alone.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Environment variables the images set; flags of the same meaning win over them.
const (
	envVersion    = "NODE_AGENT_VERSION"
	envPort       = "NODE_AGENT_PORT"
	envCrashAfter = "NODE_AGENT_CRASH_AFTER"
	envErrorRatio = "NODE_AGENT_ERROR_RATIO"
	envNodeName   = "NODE_NAME" // set by the DaemonSet from the downward API (spec.nodeName)
)

// shutdownGrace bounds how long in-flight requests may take after SIGTERM; the kubelet's default
// grace period is 30 s.
const shutdownGrace = 10 * time.Second

type options struct {
	version    string
	port       int
	crashAfter time.Duration
	node       string
	errorRatio float64 // the share of records that fail, from 0 to 1
}

// recordsPerSecond is how many records the agent handles, steadily from its start.
const recordsPerSecond = 20

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		log.Error("Invalid options", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		log.Error("Node agent failed", "err", err)
		os.Exit(1)
	}
}

func parseOptions(args []string) (options, error) {
	o := options{version: "dev", port: 8080, node: os.Getenv(envNodeName)}
	if v := os.Getenv(envVersion); v != "" {
		o.version = v
	}
	if v := os.Getenv(envPort); v != "" {
		p, err := strconv.Atoi(v)
		if err != nil {
			return o, fmt.Errorf("%s=%q is not a port number", envPort, v)
		}
		o.port = p
	}
	if v := os.Getenv(envCrashAfter); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return o, fmt.Errorf("%s=%q is not a duration: %w", envCrashAfter, v, err)
		}
		o.crashAfter = d
	}
	if v := os.Getenv(envErrorRatio); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return o, fmt.Errorf("%s=%q is not a number", envErrorRatio, v)
		}
		o.errorRatio = r
	}
	fs := flag.NewFlagSet("node-agent", flag.ContinueOnError)
	fs.StringVar(&o.version, "version", o.version, "the version /version reports (env "+envVersion+")")
	fs.IntVar(&o.port, "port", o.port, "the HTTP port; 0 picks a free one (env "+envPort+")")
	fs.DurationVar(&o.crashAfter, "crash-after", o.crashAfter, "exit 1 this long after start; 0 never (env "+envCrashAfter+")")
	fs.Float64Var(&o.errorRatio, "error-ratio", o.errorRatio, "the share of records that fail, from 0 to 1 (env "+envErrorRatio+")")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.port < 0 || o.port > 65535 {
		return o, fmt.Errorf("port %d is out of range", o.port)
	}
	if !(o.errorRatio >= 0 && o.errorRatio <= 1) {
		return o, fmt.Errorf("error ratio %v is not from 0 to 1", o.errorRatio)
	}
	if o.crashAfter < 0 {
		return o, fmt.Errorf("crash delay %s is negative", o.crashAfter)
	}
	return o, nil
}

// run serves until ctx ends (SIGTERM), then drains and returns nil; it returns an error when the
// port cannot be bound or the crash delay elapses.
func run(ctx context.Context, log *slog.Logger, o options) error {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(o.port))
	if err != nil {
		return fmt.Errorf("listen on port %d: %w", o.port, err)
	}
	var ready atomic.Bool
	srv := &http.Server{Handler: handler(o, &ready, time.Now()), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ready.Store(true)
	log.Info("Started node agent", "version", o.version, "node", o.node, "port", ln.Addr().(*net.TCPAddr).Port, "uid", os.Getuid())

	var crash <-chan time.Time
	if o.crashAfter > 0 {
		crash = time.After(o.crashAfter)
	}
	select {
	case err := <-served:
		return fmt.Errorf("serve HTTP: %w", err)
	case <-crash:
		_ = srv.Close()
		return fmt.Errorf("crashed on purpose %s after start (%s is set)", o.crashAfter, envCrashAfter)
	case <-ctx.Done():
	}
	ready.Store(false)
	log.Info("Stopping node agent", "reason", "signal", "grace", shutdownGrace)
	drain, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(drain); err != nil {
		return fmt.Errorf("drain HTTP connections: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP: %w", err)
	}
	log.Info("Stopped node agent", "version", o.version, "node", o.node)
	return nil
}

func handler(o options, ready *atomic.Bool, start time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"version": o.version, "node": o.node})
	})
	// Prometheus' text format by hand: this program imports only the standard library.
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		records := int64(time.Since(start).Seconds() * recordsPerSecond)
		failed := int64(float64(records) * o.errorRatio)
		labels := fmt.Sprintf("{node=%q,version=%q}", o.node, o.version)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# HELP node_agent_records_total Records the node agent handled.\n# TYPE node_agent_records_total counter\nnode_agent_records_total%s %d\n", labels, records)
		fmt.Fprintf(w, "# HELP node_agent_record_errors_total Records the node agent failed to handle.\n# TYPE node_agent_record_errors_total counter\nnode_agent_record_errors_total%s %d\n", labels, failed)
	})
	return mux
}
