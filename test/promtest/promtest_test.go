package promtest

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
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
// evaluates a rule file; answers nothing while stopped, and after a start on the same TSDB and port
// scrapes again. (What it kept from before the stop is Prometheus' own business, not asserted: a
// query at a time before the stop once came back empty on a loaded machine.)
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

// A target's Labels are on its series; a scraped label that clashes with one is renamed
// exported_<name>, unless the target honors scraped labels, as a ServiceMonitor's honorLabels asks.
func TestTargetLabelsAndHonorLabels(t *testing.T) {
	registry := prometheus.NewRegistry()
	labelled := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "promtest_labelled", Help: "A series with a namespace label of its own."}, []string{"namespace"})
	registry.MustRegister(labelled)
	labelled.WithLabelValues("scraped").Set(1)
	exporter := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	t.Cleanup(exporter.Close)
	target := map[string]string{"namespace": "target", "pod": "exporter-0"}
	s := Start(t, Options{Targets: []Target{
		{Job: "honoring", URL: exporter.URL + "/metrics", Labels: target, HonorLabels: true},
		{Job: "renaming", URL: exporter.URL + "/metrics", Labels: target},
	}})
	ctx := t.Context()
	if err := s.WaitForTargetsUp(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitForValue(ctx, t, s, `promtest_labelled{job="honoring", namespace="scraped", pod="exporter-0", exported_namespace=""}`, 1)
	waitForValue(ctx, t, s, `promtest_labelled{job="renaming", namespace="target", pod="exporter-0", exported_namespace="scraped"}`, 1)
}

// With QueryLog, every query a client sends is logged with its method, text and Prometheus' own
// time for it; PID names the running process, and 0 once it is stopped.
func TestQueryLogRecordsEachQueryAndPIDNamesTheProcess(t *testing.T) {
	s := Start(t, Options{QueryLog: true})
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(s.PID()), "comm"))
	if err != nil || strings.TrimSpace(string(comm)) != "prometheus" {
		t.Fatalf("PID %d names %q (%v), want the prometheus process", s.PID(), comm, err)
	}
	const expr = `vector(1) + on() group_left() count(up{job=~"a|b"} or vector(0))`
	before := time.Now()
	if _, err := s.Query(t.Context(), expr); err != nil {
		t.Fatal(err)
	}
	// Prometheus writes the entry after it has answered; a moment's lag is possible.
	var logged []LoggedQuery
	deadline := time.Now().Add(10 * time.Second)
	for {
		logged, err = s.QueryLog()
		if err == nil && len(logged) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no query logged within 10s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	q := logged[len(logged)-1]
	// client_golang sends queries as a POST form, so their length is not bound by a URL's limits.
	if q.Query != expr || q.Method != http.MethodPost || q.Path != "/api/v1/query" || q.Exec <= 0 ||
		q.At.Before(before.Add(-time.Second)) || q.At.After(time.Now()) {
		t.Errorf("logged %+v, want %q as a POST to /api/v1/query at about %s with its execution time", q, expr, before)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if pid := s.PID(); pid != 0 {
		t.Errorf("PID of a stopped Prometheus = %d, want 0", pid)
	}
}
