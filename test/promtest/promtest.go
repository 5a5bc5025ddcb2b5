// Package promtest runs a real Prometheus for the tests: Debian's prometheus binary on a loopback
// port, with a temporary TSDB and a scrape interval of a second, scraping the targets a test names.
// It can be stopped and started again on the same port and TSDB, as an outage mid-rollout.
package promtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// Config says what Prometheus scrapes.
type Config struct {
	// Targets are host:port addresses serving /metrics over plain HTTP, scraped as job "agents".
	Targets []string
}

// Prometheus is one real Prometheus process.
type Prometheus struct {
	bin, dir, addr string
	args           []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// scrapeInterval is short so that a test sees a changed series within seconds.
const scrapeInterval = "1s"

// Start starts Prometheus scraping cfg's targets and waits until it is ready; the test's cleanup
// stops it. Without the prometheus binary the test is skipped, naming the package to install.
func Start(t testing.TB, cfg Config) *Prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed: install Debian's prometheus package (make testdeps does, as root)")
	}
	dir := t.TempDir()
	var targets []string
	for _, target := range cfg.Targets {
		targets = append(targets, fmt.Sprintf("%q", target))
	}
	config := fmt.Sprintf("global: {scrape_interval: %[1]s, evaluation_interval: %[1]s}\nscrape_configs:\n- job_name: agents\n  static_configs:\n  - targets: [%[2]s]\n",
		scrapeInterval, strings.Join(targets, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := &Prometheus{bin: bin, dir: dir, addr: addr, args: []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
	}}
	t.Cleanup(func() { _ = p.stop() })
	p.Start(t)
	return p
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// URL is the base URL of Prometheus' HTTP API.
func (p *Prometheus) URL() string { return "http://" + p.addr }

// Start starts Prometheus again after Stop, on the same port and TSDB, and waits until it is ready.
func (p *Prometheus) Start(t testing.TB) {
	t.Helper()
	log, err := os.OpenFile(filepath.Join(p.dir, "prometheus.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start prometheus: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); log.Close() }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("prometheus exited before it was ready (%v); its log:\n%s", err, p.log())
		default:
		}
		resp, err := http.Get(p.URL() + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready after a minute; its log:\n%s", p.log())
		}
		time.Sleep(100 * time.Millisecond) // polls readiness; the deadline above bounds it
	}
}

// Stop stops Prometheus (SIGTERM, as a pod is stopped) and waits until it has exited.
func (p *Prometheus) Stop(t testing.TB) {
	t.Helper()
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
}

func (p *Prometheus) stop() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		return errors.New("prometheus did not stop within 30s of SIGTERM; killed")
	}
}

func (p *Prometheus) log() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "prometheus.log"))
	return string(b)
}

// Query runs an instant query.
func (p *Prometheus) Query(ctx context.Context, expr string) (model.Value, error) {
	client, err := api.NewClient(api.Config{Address: p.URL()})
	if err != nil {
		return nil, err
	}
	v, _, err := promv1.NewAPI(client).Query(ctx, expr, time.Now())
	return v, err
}

// WaitForSamples waits until expr returns at least n samples, and returns them.
func (p *Prometheus) WaitForSamples(t testing.TB, expr string, n int) model.Vector {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, err := p.Query(context.Background(), expr)
		vec, _ := v.(model.Vector)
		if err == nil && len(vec) >= n {
			return vec
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d samples after a minute (%v), want %d; value %v", expr, len(vec), err, n, v)
		}
		time.Sleep(250 * time.Millisecond) // polls the condition; the deadline above bounds it
	}
}
