package promtest

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"
)

// waitForValue polls expr until it returns one sample equal to want.
func waitForValue(ctx context.Context, t *testing.T, s *Server, expr string, want float64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		v, err := s.Query(ctx, expr)
		switch {
		case err != nil:
			last = err.Error()
		default:
			last = v.String()
			if vec, ok := v.(model.Vector); ok && len(vec) == 1 && float64(vec[0].Value) == want {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: want one sample of %v, last answer: %s", expr, want, last)
		case <-tick.C:
		}
	}
}

// Prometheus scrapes an HTTPS exporter that demands a bearer token, verifying its certificate;
// evaluates a rule file; and after a stop and a start on the same TSDB and port still has what it
// scraped before and scrapes again.
func TestPrometheusScrapesEvaluatesAndRestarts(t *testing.T) {
	const token = "promtest-token"
	registry := prometheus.NewRegistry()
	answer := prometheus.NewGauge(prometheus.GaugeOpts{Name: "promtest_answer", Help: "A value the test sets."})
	registry.MustRegister(answer)
	answer.Set(42)
	metrics := promhttp.HandlerFor(registry, promhttp.HandlerOpts{})
	exporter := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "no or a wrong bearer token", http.StatusUnauthorized)
			return
		}
		metrics.ServeHTTP(w, r)
	}))
	t.Cleanup(exporter.Close)

	dir := t.TempDir()
	caFile, tokenFile, rulesFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token"), filepath.Join(dir, "rules.yaml")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: exporter.Certificate().Raw})
	rules := "groups:\n  - name: promtest\n    rules:\n      - record: promtest:answer:doubled\n        expr: promtest_answer * 2\n"
	for path, content := range map[string]string{caFile: string(ca), tokenFile: token, rulesFile: rules} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	s := Start(t, Options{
		Targets:   []Target{{Job: "exporter", URL: exporter.URL + "/metrics", CAFile: caFile, BearerTokenFile: tokenFile}},
		RuleFiles: []string{rulesFile},
	})
	ctx := t.Context()
	if err := s.WaitForTargetsUp(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitForValue(ctx, t, s, `promtest_answer{job="exporter"}`, 42)
	waitForValue(ctx, t, s, `promtest:answer:doubled`, 84)
	before := time.Now()

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(ctx, "promtest_answer"); err == nil {
		t.Fatal("a stopped Prometheus answered a query")
	}
	answer.Set(43)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	v, _, err := s.API().Query(ctx, "promtest_answer", before)
	if vec, ok := v.(model.Vector); err != nil || !ok || len(vec) != 1 || vec[0].Value != 42 {
		t.Fatalf("after a restart, promtest_answer at %s is %v (%v), want the 42 scraped before", before, v, err)
	}
	if err := s.WaitForTargetsUp(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitForValue(ctx, t, s, `promtest_answer`, 43)
}

// A target that refuses the scrape is reported, with its error, by WaitForTargetsUp.
func TestWaitForTargetsUpReportsAFailingTarget(t *testing.T) {
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	t.Cleanup(exporter.Close)
	s := Start(t, Options{Targets: []Target{{Job: "forbidden", URL: exporter.URL + "/metrics"}}})
	err := s.WaitForTargetsUp(t.Context(), 15*time.Second)
	if err == nil {
		t.Fatal("WaitForTargetsUp succeeded for a target that answers 403")
	}
	if !strings.Contains(err.Error(), "403") {
		t.Errorf("WaitForTargetsUp: %v, want the target's 403 in it", err)
	}
}

// ListenHost moves Prometheus off 127.0.0.1: it answers at the address asked for.
func TestListenHost(t *testing.T) {
	s := Start(t, Options{ListenHost: "127.0.0.2"})
	if !strings.HasPrefix(s.Address(), "http://127.0.0.2:") {
		t.Errorf("Address() = %s, want the ListenHost 127.0.0.2", s.Address())
	}
	if _, err := s.Query(t.Context(), "up"); err != nil {
		t.Errorf("Prometheus at %s: %v", s.Address(), err)
	}
}

// A configuration Prometheus rejects makes Start fail at once with Prometheus' own error, not
// after the readiness timeout.
func TestStartReportsARejectedConfiguration(t *testing.T) {
	binary, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not on PATH: install Debian's prometheus package (`make testdeps` does as root)")
	}
	s := &Server{binary: binary, dir: t.TempDir(), host: "127.0.0.1", port: 1}
	if err := os.WriteFile(filepath.Join(s.dir, "prometheus.yml"), []byte("scrape_configs: [{job_name: x, no_such_field: 1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Start(t.Context())
	if err == nil {
		_ = s.Stop()
		t.Fatal("Prometheus started with a configuration it should reject")
	}
	if !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "no_such_field") {
		t.Errorf("Start: %v; want Prometheus' exit and its complaint about no_such_field", err)
	}
	if took := time.Since(start); took > readyTimeout/2 {
		t.Errorf("Start took %s to report Prometheus' exit", took)
	}
}

// A pod job reaches Prometheus as the kubernetes_sd_configs job it describes (Prometheus reports
// the configuration it loaded, defaults filled in). Discovery itself needs a cluster:
// test/e2e/realnode scrapes real pods with it.
func TestPodJob(t *testing.T) {
	binary := KubernetesSDBinary(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// No API server listens there: Prometheus loads the job and retries its watch.
	const unreachable = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(kubeconfig, []byte(unreachable), 0o600); err != nil {
		t.Fatal(err)
	}
	relabel := []RelabelConfig{
		{SourceLabels: []string{"__meta_kubernetes_pod_label_app"}, Regex: "agent", Action: "keep"},
		{SourceLabels: []string{"__meta_kubernetes_pod_label_controller_revision_hash"}, TargetLabel: "revision"},
	}
	s := Start(t, Options{Binary: binary, PodJobs: []PodJob{{Job: "agents", KubeconfigFile: kubeconfig, Namespaces: []string{"ns1"}, RelabelConfigs: relabel}}})
	loaded, err := s.API().Config(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		ScrapeConfigs []struct {
			JobName             string `json:"job_name"`
			MetricsPath         string `json:"metrics_path"`
			KubernetesSDConfigs []struct {
				Role           string `json:"role"`
				KubeconfigFile string `json:"kubeconfig_file"`
				Namespaces     struct {
					Names []string `json:"names"`
				} `json:"namespaces"`
			} `json:"kubernetes_sd_configs"`
			RelabelConfigs []struct {
				SourceLabels []string `json:"source_labels"`
				Regex        string   `json:"regex"`
				TargetLabel  string   `json:"target_label"`
				Replacement  string   `json:"replacement"`
				Action       string   `json:"action"`
			} `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(loaded.YAML), &config); err != nil {
		t.Fatalf("Prometheus' loaded configuration: %v\n%s", err, loaded.YAML)
	}
	if len(config.ScrapeConfigs) != 1 {
		t.Fatalf("%d scrape configs loaded, want the pod job:\n%s", len(config.ScrapeConfigs), loaded.YAML)
	}
	job := config.ScrapeConfigs[0]
	if job.JobName != "agents" || job.MetricsPath != "/metrics" || len(job.KubernetesSDConfigs) != 1 {
		t.Fatalf("loaded %+v, want job agents scraping /metrics of pods it discovers:\n%s", job, loaded.YAML)
	}
	if sd := job.KubernetesSDConfigs[0]; sd.Role != "pod" || sd.KubeconfigFile != kubeconfig || strings.Join(sd.Namespaces.Names, ",") != "ns1" {
		t.Errorf("loaded discovery %+v, want role pod in ns1 through %s", sd, kubeconfig)
	}
	if r := job.RelabelConfigs; len(r) != 2 || r[0].Action != "keep" || r[0].Regex != "agent" ||
		r[1].Action != "replace" || r[1].TargetLabel != "revision" || r[1].Replacement != "$1" {
		t.Errorf("loaded relabel_configs %+v, want keep app=agent, then the revision hash copied to revision with Prometheus' defaults", r)
	}
}
