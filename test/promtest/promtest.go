// Package promtest runs the real Prometheus server for tests: Debian's prometheus binary on a free
// loopback port, with a temporary TSDB, a generated configuration that scrapes the caller's targets
// and evaluates the caller's rule files every second. Tests query it with client_golang's API
// client, and may stop and start it again on the same TSDB and port (an e2e test that loses its
// Prometheus mid-rollout). A test skips, naming the Debian package, when the binary is missing.
// A test's Prometheus can scrape a cluster's pods with the labels Kubernetes discovery gives them
// (PodJobs, podsd.go), and listen where the cluster's pods reach it (ListenHost).
package promtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// Target is one endpoint Prometheus scrapes, in a scrape job of its own.
type Target struct {
	// Job is the job label of its series; unique among the targets.
	Job string
	// URL is the metrics endpoint, e.g. https://127.0.0.1:8443/metrics: its scheme, host and path.
	URL string
	// CAFile verifies the target's certificate (https); ServerName is the name it must cover when
	// not the URL's host. InsecureSkipVerify accepts any certificate.
	CAFile             string
	ServerName         string
	InsecureSkipVerify bool
	// BearerTokenFile is a file whose content Prometheus sends as a bearer token, read anew at
	// every scrape.
	BearerTokenFile string
	// Labels are attached to every series of the target, as service discovery attaches the
	// target's namespace and pod in a cluster.
	Labels map[string]string
	// HonorLabels keeps a scraped label that clashes with a target label (Labels, job, instance)
	// instead of renaming it exported_<name>.
	HonorLabels bool
}

// Options configures the server.
type Options struct {
	// ListenHost is the address Prometheus listens on; 127.0.0.1 when empty. Pods of the local
	// cluster's real node reach the host only at its address on the node's network
	// (localcluster's Cluster.NodeHostIP), so a controller pod that queries Prometheus needs that.
	ListenHost string
	// PodJobs are scrape jobs whose targets are a cluster's pods (podsd.go).
	PodJobs []PodJob

	Targets []Target
	// RuleFiles are Prometheus rule files (recording and alerting rules), evaluated every Interval.
	RuleFiles []string
	// Interval is the scrape and evaluation interval; 1s when zero.
	Interval time.Duration
	// QueryLog makes Prometheus log every query it evaluates (its query_log_file), for
	// Server.QueryLog: what a client sent, how, and how long Prometheus took, per query.
	QueryLog bool
}

// Server is a running (or stopped) Prometheus.
type Server struct {
	binary string
	dir    string // holds the configuration, the log and, under tsdb, the TSDB
	host   string
	port   int
	api    promv1.API

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd's exit, once done is closed
}

// readyTimeout bounds the start of Prometheus, WAL replay included.
const readyTimeout = time.Minute

// Start starts Prometheus for the test and stops it when the test ends. It skips the test when
// Debian's prometheus package is not installed.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	binary, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not on PATH: install Debian's prometheus package (`make testdeps` does as root)")
	}
	host := opts.ListenHost
	if host == "" {
		host = "127.0.0.1"
	}
	port, err := freePort(host)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{binary: binary, dir: t.TempDir(), host: host, port: port}
	sd, err := servePodDiscovery(t, opts.PodJobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.writeConfig(opts, sd); err != nil {
		t.Fatal(err)
	}
	client, err := api.NewClient(api.Config{Address: s.Address()})
	if err != nil {
		t.Fatal(err)
	}
	s.api = promv1.NewAPI(client)
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stop prometheus: %v", err)
		}
	})
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

// Address is the base URL of Prometheus's HTTP API and UI.
func (s *Server) Address() string {
	return "http://" + net.JoinHostPort(s.host, strconv.Itoa(s.port))
}

// API is client_golang's client of the server's HTTP API, for what Query does not cover.
func (s *Server) API() promv1.API { return s.api }

// PID is the process ID of the running Prometheus, for a benchmark that reads its CPU time and
// memory in /proc; 0 while it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Query evaluates expr now; Prometheus's warnings make it fail, since a test should not rely on a
// partial answer.
func (s *Server) Query(ctx context.Context, expr string) (model.Value, error) {
	v, warnings, err := s.api.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("query %q: warnings %v", expr, warnings)
	}
	return v, nil
}

// Start starts Prometheus on the server's port and TSDB, again after Stop, and waits until it is
// ready (/-/ready). It fails when Prometheus is running already.
func (s *Server) Start(ctx context.Context) error {
	done, err := s.start()
	if err != nil {
		return err
	}
	// Without the lock: the goroutine that reaps Prometheus takes it before it closes done, so
	// a Prometheus that exits at once (a configuration it rejects) is reported at once.
	if err := s.waitReady(ctx, done); err != nil {
		return fmt.Errorf("%w\n%s", err, s.logTail())
	}
	return nil
}

// start starts the Prometheus process and the goroutine that reaps it, which closes done when
// the process has exited.
func (s *Server) start() (done chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil, errors.New("prometheus is running already")
	}
	logFile, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor
	cmd := exec.Command(s.binary,
		"--config.file="+filepath.Join(s.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(s.dir, "tsdb"),
		"--web.listen-address="+net.JoinHostPort(s.host, strconv.Itoa(s.port)),
		"--web.enable-lifecycle",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.binary, err)
	}
	done = make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(done)
	}()
	return done, nil
}

// waitReady polls /-/ready until it answers 200, Prometheus exits or the deadline passes.
func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Address()+"/-/ready", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/-/ready answered %s", resp.Status)
		}
		last = err
		select {
		case <-exited:
			return fmt.Errorf("prometheus exited before it was ready: %v", s.exitErr())
		case <-ctx.Done():
			return fmt.Errorf("prometheus not ready after %s: %v", readyTimeout, last)
		case <-tick.C:
		}
	}
}

// Stop stops Prometheus (SIGTERM, so it closes its TSDB cleanly; SIGKILL after 30s) and waits for
// it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("prometheus did not stop within 30s of SIGTERM; killed\n%s", s.logTail())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmd, s.done = nil, nil
	var exit *exec.ExitError
	if s.err != nil && !errors.As(s.err, &exit) {
		return s.err
	}
	return nil
}

// WaitForTargetsUp polls the targets API until every configured target's last scrape succeeded.
func (s *Server) WaitForTargetsUp(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		targets, err := s.api.Targets(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			// The deadline cut this request short: keep what the targets said before.
		case err != nil:
			last = err.Error()
		case len(targets.Active) == 0:
			last = "no active target"
		default:
			last = ""
			for _, target := range targets.Active {
				if target.Health != promv1.HealthGood {
					last += fmt.Sprintf("%s %s: %s %s; ", target.Labels["job"], target.ScrapeURL, target.Health, target.LastError)
				}
			}
			if last == "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("targets not up after %s: %s", timeout, last)
		case <-tick.C:
		}
	}
}

// WaitForSamples polls expr until it returns at least n samples, and returns them; it fails the
// test after a minute.
func (s *Server) WaitForSamples(t testing.TB, expr string, n int) model.Vector {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		v, err := s.Query(ctx, expr)
		vec, _ := v.(model.Vector)
		switch {
		case err != nil:
			last = err.Error()
		case len(vec) >= n:
			return vec
		default:
			last = fmt.Sprintf("%d samples: %v", len(vec), v)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: want at least %d samples after a minute; last answer: %s", expr, n, last)
		case <-tick.C:
		}
	}
}

func (s *Server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "prometheus.log") }

// logTail is the end of Prometheus's log, for errors.
func (s *Server) logTail() string {
	data, err := os.ReadFile(s.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(data) > 4000 {
		data = data[len(data)-4000:]
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return "prometheus log:\n" + string(data)
}

// writeConfig writes prometheus.yml: one scrape job per target, the rule files, and the interval
// for both scraping and rule evaluation.
func (s *Server) writeConfig(opts Options, sd map[string]string) error {
	interval := opts.Interval
	if interval == 0 {
		interval = time.Second
	}
	type tlsConfig struct {
		CAFile             string `json:"ca_file,omitempty"`
		ServerName         string `json:"server_name,omitempty"`
		InsecureSkipVerify bool   `json:"insecure_skip_verify,omitempty"`
	}
	type authorization struct {
		CredentialsFile string `json:"credentials_file"`
	}
	type staticConfig struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels,omitempty"`
	}
	type scrapeConfig struct {
		JobName       string         `json:"job_name"`
		Scheme        string         `json:"scheme"`
		MetricsPath   string         `json:"metrics_path"`
		HonorLabels   bool           `json:"honor_labels,omitempty"`
		TLSConfig     *tlsConfig     `json:"tls_config,omitempty"`
		Authorization *authorization `json:"authorization,omitempty"`
		StaticConfigs []staticConfig `json:"static_configs"`
	}
	var scrapes []scrapeConfig
	jobs := map[string]bool{}
	pods, err := podScrapeConfigs(opts.PodJobs, sd, jobs)
	if err != nil {
		return err
	}
	for _, target := range opts.Targets {
		if target.Job == "" || jobs[target.Job] {
			return fmt.Errorf("target %s: job %q is empty or not unique", target.URL, target.Job)
		}
		jobs[target.Job] = true
		u, err := url.Parse(target.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("target %s: want an http or https URL with a host (%v)", target.URL, err)
		}
		scrape := scrapeConfig{JobName: target.Job, Scheme: u.Scheme, MetricsPath: u.Path, HonorLabels: target.HonorLabels,
			StaticConfigs: []staticConfig{{Targets: []string{u.Host}, Labels: target.Labels}}}
		if scrape.MetricsPath == "" {
			scrape.MetricsPath = "/metrics"
		}
		if target.CAFile != "" || target.ServerName != "" || target.InsecureSkipVerify {
			scrape.TLSConfig = &tlsConfig{CAFile: target.CAFile, ServerName: target.ServerName, InsecureSkipVerify: target.InsecureSkipVerify}
		}
		if target.BearerTokenFile != "" {
			scrape.Authorization = &authorization{CredentialsFile: target.BearerTokenFile}
		}
		scrapes = append(scrapes, scrape)
	}
	global := map[string]string{
		"scrape_interval":     model.Duration(interval).String(),
		"scrape_timeout":      model.Duration(interval).String(),
		"evaluation_interval": model.Duration(interval).String(),
	}
	if opts.QueryLog {
		global["query_log_file"] = s.queryLogPath()
	}
	config := map[string]any{
		"global":         global,
		"rule_files":     opts.RuleFiles,
		"scrape_configs": append(toAny(scrapes), pods...),
	}
	data, err := yaml.Marshal(config)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.dir, "prometheus.yml"), data, 0o600)
}

// toAny converts a slice to []any, to append scrape configs of other types to it.
func toAny[T any](s []T) []any {
	out := make([]any, 0, len(s))
	for _, v := range s {
		out = append(out, v)
	}
	return out
}

// freePort returns a port of host free right now.
func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) queryLogPath() string { return filepath.Join(s.dir, "query.log") }

// LoggedQuery is one query Prometheus evaluated, as its query log records it.
type LoggedQuery struct {
	// At is the query's evaluation time: for an instant query without a time, when Prometheus
	// received it.
	At time.Time
	// Method and Path are the HTTP request's (POST or GET, /api/v1/query); empty for a query a
	// rule evaluated.
	Method, Path string
	// Query is the PromQL expression as Prometheus received it.
	Query string
	// Exec is Prometheus' own time for the query: waiting for a slot, preparing (reading the
	// series), evaluating and sorting; not the HTTP request's reading and the answer's encoding.
	Exec time.Duration
}

// QueryLog reads every query Prometheus has logged so far; Options.QueryLog must be set.
func (s *Server) QueryLog() ([]LoggedQuery, error) {
	data, err := os.ReadFile(s.queryLogPath())
	if err != nil {
		return nil, err
	}
	// The fields of Prometheus 2's query log (promql.Engine's QueryLogger entries).
	type entry struct {
		HTTPRequest struct {
			Method string `json:"method"`
			Path   string `json:"path"`
		} `json:"httpRequest"`
		Params struct {
			End   time.Time `json:"end"`
			Query string    `json:"query"`
		} `json:"params"`
		Stats struct {
			Timings struct {
				ExecTotalTime float64 `json:"execTotalTime"`
			} `json:"timings"`
		} `json:"stats"`
	}
	var out []LoggedQuery
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var e entry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("query log line %q: %w", line, err)
		}
		out = append(out, LoggedQuery{
			At: e.Params.End, Method: e.HTTPRequest.Method, Path: e.HTTPRequest.Path, Query: e.Params.Query,
			Exec: time.Duration(e.Stats.Timings.ExecTotalTime * float64(time.Second)),
		})
	}
	return out, nil
}
