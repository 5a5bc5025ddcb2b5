// Package loadgen measures daemonguard's admission webhooks the way the API server meets them:
// over HTTPS, open loop, at fixed request rates, against a null webhook (one that decodes the
// review and allows) served by the same HTTP server and TLS, in the generator's process or each in
// a process of its own, so that the latency ratio daemonguard/null is what daemonguard costs over
// doing nothing.
//
// Open loop: request i of a step is due at start + i/rate and is sent then, whether or not earlier
// requests have been answered, and its latency runs from that due time to the end of the response
// body. A server that stalls therefore cannot slow the generator down and hide the requests that
// would have queued behind the stall (coordinated omission).
package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// Config is one load run.
type Config struct {
	Rates    []int         // requests per second, one step per rate and target
	Duration time.Duration // of each step
	// Rounds repeats the whole sweep of rates (at least 1). On a shared machine one pair of steps
	// can be disturbed by other work; the median ratio over rounds is robust to that, and every
	// round is reported.
	Rounds  int
	Timeout time.Duration // per request, counted from its due time (waiting for a slot included)
	// MaxInFlight caps the requests in flight per target, as the API server's own concurrency limits
	// do (--max-mutating-requests-inflight 200, API Priority and Fairness). A request due while the
	// cap is reached waits for a slot, and the wait counts in its latency: the schedule stays open
	// loop. Without a cap an overloaded server makes the client dial connection after connection.
	MaxInFlight int
	Warmup      time.Duration // per target before the first step, at the lowest rate, not recorded
	Pause       time.Duration // between steps (after a GC), so a step's stragglers do not overlap the next
	Mix         Mix
	Nodes       int    // size of the cluster the cluster facts describe
	HTTP1       bool   // HTTP/1.1 over many keep-alive connections instead of HTTP/2 (what the API server uses when offered); also when the servers do not offer HTTP/2 (ServerOptions.HTTP2)
	Seed        uint64 // of the request sequence
	// UniqueObjects makes every DaemonSet request carry an object not sent before (see
	// fixture.Options), as distinct writes do; otherwise each variant's object repeats.
	UniqueObjects bool
	Progress      io.Writer
}

// DefaultConfig is 500, 1,000 and 2,000 requests/s for 10s each, the default mix, 5 nodes, HTTP/2.
func DefaultConfig() Config {
	return Config{
		Rates: []int{500, 1000, 2000}, Duration: 10 * time.Second, Timeout: 10 * time.Second, MaxInFlight: 256,
		Warmup: 2 * time.Second, Pause: time.Second, Mix: DefaultMix(), Nodes: 5, Seed: 1, Rounds: 1,
	}
}

// Result is one step: one target at one rate.
type Result struct {
	Round    int     `json:"round"` // from 1
	Target   string  `json:"target"`
	Rate     int     `json:"rate"`
	Sent     int     `json:"sent"`
	OK       int     `json:"ok"`
	Errors   int     `json:"errors"`
	Achieved float64 `json:"achievedPerSecond"` // answered requests / (last answer - start)
	// Latency from each request's due time to the end of its response; failed requests included
	// (a timed-out request counts as its timeout).
	P50 time.Duration `json:"p50"`
	P90 time.Duration `json:"p90"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
	// How late the generator started requests (due time to the request's goroutine running): the
	// generator's own share of the latencies above.
	SendLagP50 time.Duration `json:"sendLagP50"`
	SendLagP99 time.Duration `json:"sendLagP99"`
	// CPU time (user + system, GC included) per request during the step of the process the
	// target runs in: its own process, or the one process of servers and generator; 0 where
	// unmeasured.
	CPUPerRequest time.Duration `json:"cpuPerRequest"`
	// Heap bytes that process allocated per request during the step, and the garbage collections
	// it ran: on two cores a collection takes a good part of one, so these show how much of a
	// target's tail its allocations explain.
	AllocPerRequest int64 `json:"allocBytesPerRequest"`
	GCCycles        int64 `json:"gcCycles"`
	// The generator's own CPU and allocation per request, where it runs in a process of its own.
	GeneratorCPUPerRequest   time.Duration `json:"generatorCpuPerRequest,omitempty"`
	GeneratorAllocPerRequest int64         `json:"generatorAllocBytesPerRequest,omitempty"`
	ErrorSamples             []string      `json:"errorSamples,omitempty"`
}

// Report is a whole run.
type Report struct {
	Config struct {
		Rates       []int         `json:"rates"`
		Rounds      int           `json:"rounds"`
		Duration    time.Duration `json:"duration"`
		Timeout     time.Duration `json:"timeout"`
		MaxInFlight int           `json:"maxInFlight"`
		Mix         string        `json:"mix"`
		Nodes       int           `json:"nodes"`
		Protocol    string        `json:"protocol"`
		Objects     string        `json:"objects"` // "repeated" or "unique" (Config.UniqueObjects)
		// Processes says where the servers ran: InProcess or OwnProcesses.
		Processes string `json:"processes"`
		// ServerMaxProcs is the servers' GOMAXPROCS (ServerOptions.MaxProcs), 0 when not set.
		ServerMaxProcs int    `json:"serverGomaxprocs"`
		GoVersion      string `json:"goVersion"`
		CPUs           int    `json:"cpus"`
		MaxProcs       int    `json:"gomaxprocs"`
	} `json:"config"`
	Results []Result `json:"results"`
}

// Run drives both servers at every rate and returns the results. For each rate it runs the null
// webhook and daemonguard back to back, alternating which goes first, so that both see the same
// machine conditions. It stops early, with ctx's error, when ctx ends.
func Run(ctx context.Context, cfg Config, servers *Servers) (*Report, error) {
	if len(cfg.Rates) == 0 || cfg.Duration <= 0 || cfg.Timeout <= 0 || cfg.MaxInFlight <= 0 {
		return nil, fmt.Errorf("need at least one rate, a duration, a timeout and a positive in-flight cap")
	}
	for i, r := range cfg.Rates {
		if r <= 0 {
			return nil, fmt.Errorf("rate %d is not positive", r)
		}
		if slices.Contains(cfg.Rates[:i], r) {
			return nil, fmt.Errorf("rate %d is given twice; use -rounds to repeat", r)
		}
	}
	cases, err := fixture.CasesWith(fixture.Options{UniqueObjects: cfg.UniqueObjects})
	if err != nil {
		return nil, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	rep := &Report{}
	rc := &rep.Config
	rc.Rounds = max(cfg.Rounds, 1)
	rc.Rates, rc.Duration, rc.Timeout, rc.MaxInFlight, rc.Mix, rc.Nodes = cfg.Rates, cfg.Duration, cfg.Timeout, cfg.MaxInFlight, cfg.Mix.String(), cfg.Nodes
	rc.Protocol, rc.GoVersion, rc.CPUs, rc.MaxProcs = "HTTP/2", runtime.Version(), runtime.NumCPU(), runtime.GOMAXPROCS(0)
	http1 := cfg.HTTP1 || !servers.Options.HTTP2
	if http1 {
		rc.Protocol = "HTTP/1.1"
	}
	rc.Processes, rc.ServerMaxProcs = servers.Processes, servers.Options.MaxProcs
	rc.Objects = "repeated"
	if cfg.UniqueObjects {
		rc.Objects = "unique"
	}

	clients := map[string]*http.Client{}
	for _, t := range []*Target{servers.Null, servers.Daemonguard} {
		clients[t.Name] = newClient(servers.RootCAs, http1)
		defer clients[t.Name].CloseIdleConnections()
	}
	stepID := uint32(0)
	step := func(t *Target, rate int, d time.Duration) (Result, error) {
		stepID++
		seq, err := Sequence(cases, cfg.Mix, Requests(rate, d), cfg.Seed+uint64(rate))
		if err != nil {
			return Result{}, err
		}
		client := clients[t.Name]
		runtime.GC()
		if _, err := targetStats(ctx, client, t, true); err != nil {
			return Result{}, err
		}
		if err := sleepCtx(ctx, cfg.Pause); err != nil {
			return Result{}, err
		}
		gen0 := readProcessStats()
		srv0, err := targetStats(ctx, client, t, false)
		if err != nil {
			return Result{}, err
		}
		r := runStep(ctx, client, t, stepSpec{rate: rate, timeout: cfg.Timeout, maxInFlight: cfg.MaxInFlight, id: stepID}, cases, seq)
		if err := ctx.Err(); err != nil {
			return r, err
		}
		srv1, err := targetStats(ctx, client, t, false)
		if err != nil {
			return Result{}, err
		}
		r.setProcessStats(srv1.Minus(srv0), readProcessStats().Minus(gen0), servers.Processes == OwnProcesses)
		return r, nil
	}

	if cfg.Warmup > 0 {
		warm := slices.Min(cfg.Rates)
		for _, t := range []*Target{servers.Null, servers.Daemonguard} {
			fmt.Fprintf(progress, "warm-up: %s at %d/s for %v\n", t.Name, warm, cfg.Warmup)
			if _, err := step(t, warm, cfg.Warmup); err != nil {
				return nil, err
			}
		}
	}
	for round := 1; round <= rc.Rounds; round++ {
		for k, rate := range cfg.Rates {
			order := []*Target{servers.Null, servers.Daemonguard}
			if (round-1+k)%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, t := range order {
				fmt.Fprintf(progress, "round %d: %s at %d/s for %v ... ", round, t.Name, rate, cfg.Duration)
				r, err := step(t, rate, cfg.Duration)
				if err != nil {
					return nil, err
				}
				r.Round = round
				fmt.Fprintf(progress, "ok %d/%d, p50 %v, p99 %v\n", r.OK, r.Sent, r.P50, r.P99)
				rep.Results = append(rep.Results, r)
			}
		}
	}
	return rep, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newClient is a client for one target: HTTP/2 over one multiplexed connection as the API server's
// webhook client does (more connections open when the server's stream limit is reached), or with
// http1 as many keep-alive HTTP/1.1 connections as there are requests in flight.
func newClient(pool *x509.CertPool, http1 bool) *http.Client {
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"},
		ForceAttemptHTTP2:   !http1,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	if http1 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr} // deadlines are per request, from the due time
}

// reviewResponse is the part of an AdmissionReview response the generator checks.
type reviewResponse struct {
	Response *struct {
		UID     string `json:"uid"`
		Allowed bool   `json:"allowed"`
		Patch   []byte `json:"patch"`
		Status  *struct {
			Code    int32  `json:"code"`
			Message string `json:"message"`
		} `json:"status"`
	} `json:"response"`
}

type stepSpec struct {
	rate        int
	timeout     time.Duration
	maxInFlight int
	id          uint32
}

// runStep sends seq (indices into cases) to t at the step's rate, open loop, and waits for every
// answer (each bounded by the timeout from its due time).
func runStep(ctx context.Context, client *http.Client, t *Target, spec stepSpec, cases []fixture.Case, seq []int) Result {
	n := len(seq)
	latency := make([]time.Duration, n)
	lag := make([]time.Duration, n)
	failed := make([]bool, n)
	slots := make(chan struct{}, spec.maxInFlight)
	var (
		mu      sync.Mutex
		samples []string
		lastEnd atomic.Int64
		wg      sync.WaitGroup
	)
	fail := func(i int, format string, args ...any) {
		failed[i] = true
		mu.Lock()
		if len(samples) < 5 {
			samples = append(samples, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}

	start := time.Now().Add(10 * time.Millisecond)
	sent := pace(ctx.Done(), start, n, spec.rate, func(i int, due time.Time) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lag[i] = time.Since(due)
			c := &cases[seq[i]]
			uid := fixture.UID(spec.id, uint64(i)) // every request its own UID, checked in the answer
			reqCtx, cancel := context.WithDeadline(ctx, due.Add(spec.timeout))
			defer cancel()
			var (
				body   []byte
				status int
				err    error
			)
			select {
			case slots <- struct{}{}:
				body, status, err = post(reqCtx, client, t.URL+c.Path, c.WithUID(uid))
				<-slots
			case <-reqCtx.Done():
				err = fmt.Errorf("no free slot (%d in flight) before the timeout: %w", spec.maxInFlight, reqCtx.Err())
			}
			end := time.Now()
			latency[i] = end.Sub(due)
			for {
				last := lastEnd.Load()
				if end.UnixNano() <= last || lastEnd.CompareAndSwap(last, end.UnixNano()) {
					break
				}
			}
			if err != nil {
				fail(i, "%s: %v", c.Name, err)
				return
			}
			if status != http.StatusOK {
				fail(i, "%s: HTTP %d: %.200s", c.Name, status, body)
				return
			}
			var rr reviewResponse
			switch err := json.Unmarshal(body, &rr); {
			case err != nil:
				fail(i, "%s: decode response: %v", c.Name, err)
			case rr.Response == nil:
				fail(i, "%s: no response in %.200s", c.Name, body)
			case rr.Response.UID != uid:
				fail(i, "%s: response uid %q, want %q", c.Name, rr.Response.UID, uid)
			case !rr.Response.Allowed:
				fail(i, "%s: not allowed: %.300s", c.Name, body)
			case (len(rr.Response.Patch) > 0) != t.WantPatch(c):
				fail(i, "%s: patch %q, want a patch: %v", c.Name, rr.Response.Patch, t.WantPatch(c))
			}
		}()
	})
	wg.Wait()
	n = sent // fewer when interrupted; the rest were never sent
	latency, lag, failed = latency[:n], lag[:n], failed[:n]

	r := Result{Target: t.Name, Rate: spec.rate, Sent: n, ErrorSamples: samples}
	for _, f := range failed {
		if f {
			r.Errors++
		}
	}
	r.OK = n - r.Errors
	if span := time.Duration(lastEnd.Load() - start.UnixNano()); span > 0 {
		r.Achieved = float64(r.OK) / span.Seconds()
	}
	s := Summarize(latency)
	r.P50, r.P90, r.P99, r.Max = s.P50, s.P90, s.P99, s.Max
	l := Summarize(lag)
	r.SendLagP50, r.SendLagP99 = l.P50, l.P99
	return r
}

// setProcessStats sets the per-request CPU and allocation columns from the server process's
// counters over the step and, when the generator runs in a process of its own, the generator's.
func (r *Result) setProcessStats(server, generator ProcessStats, ownProcesses bool) {
	if r.Sent == 0 {
		return
	}
	n := int64(r.Sent)
	r.CPUPerRequest = server.CPU / time.Duration(n)
	r.AllocPerRequest = int64(server.AllocBytes) / n
	r.GCCycles = int64(server.GCCycles)
	if ownProcesses {
		r.GeneratorCPUPerRequest = generator.CPU / time.Duration(n)
		r.GeneratorAllocPerRequest = int64(generator.AllocBytes) / n
	}
}

// post sends one AdmissionReview and reads the whole response.
func post(ctx context.Context, client *http.Client, url string, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, */*")
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return out, resp.StatusCode, err
}
