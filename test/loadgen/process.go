package loadgen

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// A webhook runs in a pod of its own and the API server in another process; in one shared
// process the server under test would pay for the generator's garbage and the generator for the
// server's (collections stop and assist every goroutine of a process). StartServerProcesses
// therefore runs each server as a child process: the loadgen binary itself (or this package's
// test binary) started again with serveEnv set, which ServeChildIfAsked turns into serving one
// target until its stdin closes.

// serveEnv carries a childSpec as JSON to a child process.
const serveEnv = "DAEMONGUARD_LOADGEN_SERVE"

// childSpec says which target a child serves and how.
type childSpec struct {
	Target  string        `json:"target"`
	Options ServerOptions `json:"options"`
	// CPUProfile, when set, is where the child writes a CPU profile of its whole run.
	CPUProfile string `json:"cpuProfile,omitempty"`
}

// childHello is the one line a child writes to its stdout once it completes TLS handshakes.
type childHello struct {
	URL     string `json:"url"`
	CertPEM []byte `json:"certPEM"`
}

// ServeChildIfAsked returns at once in a process that is not a server child. In one started by
// StartServerProcesses it serves the target its environment names until its stdin closes (the
// parent stops it or is gone) and exits the process. Call it first in main and in TestMain.
func ServeChildIfAsked() {
	spec, ok := os.LookupEnv(serveEnv)
	if !ok {
		return
	}
	// Ctrl-C in a terminal goes to the whole process group; the parent handles it and stops its
	// children by closing their stdin, which lets each finish its CPU profile.
	signal.Ignore(os.Interrupt)
	if err := serveChild(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "loadgen server child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveChild(specJSON string, stdin io.Reader, stdout io.Writer) (err error) {
	var spec childSpec
	dec := json.NewDecoder(strings.NewReader(specJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("%s: %w", serveEnv, err)
	}
	log := SetWebhookLogging()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	if spec.CPUProfile != "" {
		f, err := os.Create(spec.CPUProfile)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	hooks, err := targetHooks(ctx, spec.Target, spec.Options, log)
	if err != nil {
		return err
	}
	cert, pool, err := SelfSignedCert()
	if err != nil {
		return err
	}
	t, err := startServer(ctx, ctx, spec.Target, cert, pool, spec.Options, hooks)
	if err != nil {
		return err
	}
	hello, err := json.Marshal(childHello{URL: t.URL, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Leaf.Raw})})
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", hello); err != nil {
		return err
	}
	return <-t.done
}

// SetWebhookLogging sets up logging as `daemonguard webhook` does (JSON, info level), written
// nowhere, and returns the logger: the per-request logger construction is part of a server's cost
// in production, so both the generator's process and every server process measure it.
func SetWebhookLogging() logr.Logger {
	log := zap.New(zap.UseDevMode(false), zap.WriteTo(io.Discard))
	ctrl.SetLogger(log)
	return log
}

// ChartGC is the garbage collector's settings the chart gives a webhook replica by default
// (webhook.gcPercent, webhook.gcMemoryLimit). daemonguard's server process runs with them, as a
// replica the chart installs does; the null webhook with Go's defaults. The charts' tests hold
// them to the chart's values.
var ChartGC = []string{"GOGC=400", "GOMEMLIMIT=128MiB"}

// StartServerProcesses starts the null webhook and daemonguard (as StartServers builds them), each
// in a child process of its own: this executable started again, which must call
// ServeChildIfAsked first; daemonguard's with ChartGC. They run until Close or until this process
// exits.
func StartServerProcesses(ctx context.Context, opts ServerOptions, cpuProfile string) (*Servers, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this executable to start the servers: %w", err)
	}
	opts.ProfileLabels = false // one target per process: its profile is its own
	s := &Servers{Options: opts, Processes: OwnProcesses, RootCAs: x509.NewCertPool()}
	for _, name := range []string{Null, Daemonguard} {
		spec := childSpec{Target: name, Options: opts}
		if cpuProfile != "" {
			spec.CPUProfile = cpuProfile + "." + name
		}
		t, err := s.startChild(ctx, exe, spec)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("start %s server process: %w", name, err)
		}
		s.set(t)
	}
	return s, nil
}

func (s *Servers) startChild(ctx context.Context, exe string, spec childSpec) (*Target, error) {
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), serveEnv+"="+string(specJSON))
	if spec.Target == Daemonguard {
		cmd.Env = append(cmd.Env, ChartGC...)
	}
	if spec.Options.MaxProcs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(spec.Options.MaxProcs))
	}
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stderr = io.MultiWriter(os.Stderr, stderr)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.stdins = append(s.stdins, stdin)
	t := &Target{Name: spec.Target, WantPatch: wantPatch(spec.Target), PID: cmd.Process.Pid, done: make(chan error, 1), kill: func() { _ = cmd.Process.Kill() }}
	lines := bufio.NewReader(stdout)
	hello := make(chan error, 1)
	var h childHello
	go func() {
		line, err := lines.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(line, &h)
		}
		hello <- err
		// Wait only once stdout is drained (os/exec's rule); the child writes nothing more.
		_, _ = io.Copy(io.Discard, lines)
		t.done <- cmd.Wait()
	}()
	// Compiling the built-in policies takes a few seconds on a busy machine.
	timer := time.NewTimer(2 * time.Minute)
	defer timer.Stop()
	select {
	case err = <-hello:
	case <-ctx.Done():
		err = ctx.Err()
	case <-timer.C:
		err = errors.New("no answer within 2 minutes")
	}
	if err != nil {
		t.kill()
		exit := <-t.done
		// After Wait the child's stderr is copied whole: say why it ended.
		return nil, fmt.Errorf("%w (process: %v; stderr: %q)", err, exit, strings.TrimSpace(stderr.String()))
	}
	if !s.RootCAs.AppendCertsFromPEM(h.CertPEM) {
		t.kill()
		<-t.done
		return nil, errors.New("the server process sent no certificate")
	}
	t.URL = h.URL
	return t, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// StatsPath is where every server of the generator answers with its process's ProcessStats;
// with ?gc=1 it first runs a garbage collection, so that each step starts from a collected heap.
const StatsPath = "/loadgen/stats"

// ProcessStats are a process's CPU time and heap counters.
type ProcessStats struct {
	CPU        time.Duration `json:"cpu"` // user + system
	AllocBytes uint64        `json:"allocBytes"`
	GCCycles   uint64        `json:"gcCycles"`
}

// Minus is the change from o to p.
func (p ProcessStats) Minus(o ProcessStats) ProcessStats {
	return ProcessStats{CPU: p.CPU - o.CPU, AllocBytes: p.AllocBytes - o.AllocBytes, GCCycles: p.GCCycles - o.GCCycles}
}

var heapSamples = []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}

// readProcessStats reads this process's counters without stopping the world (runtime.ReadMemStats
// would).
func readProcessStats() ProcessStats {
	s := slices.Clone(heapSamples)
	metrics.Read(s)
	return ProcessStats{CPU: cpuTime(), AllocBytes: s[0].Value.Uint64(), GCCycles: s[1].Value.Uint64()}
}

type statsHandler struct{}

func (statsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		http.Error(w, "GET only", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Query().Get("gc") == "1" {
		runtime.GC()
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(readProcessStats())
}

// targetStats reads the counters of the process t runs in, after a collection there if gc.
func targetStats(ctx context.Context, client *http.Client, t *Target, gc bool) (ProcessStats, error) {
	url := t.URL + StatsPath
	if gc {
		url += "?gc=1"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ProcessStats{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return ProcessStats{}, fmt.Errorf("read %s's process stats: %w", t.Name, err)
	}
	defer resp.Body.Close()
	var st ProcessStats
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("read %s's process stats: HTTP %d", t.Name, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("read %s's process stats: %w", t.Name, err)
	}
	return st, nil
}
