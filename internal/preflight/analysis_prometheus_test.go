package preflight

// The analysis check from the command's flags to its report: `rollout plan` runs on a fake API
// server (client-go's, which is all the check reads from: nodes, pods, the live DaemonSet) and
// queries a real Prometheus (test/promtest) that scrapes an exporter of per-node gauges, so the
// rendered queries, Prometheus' answers and its errors are the real ones.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/exitcode"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/promtest"
)

// agentGates are the live DaemonSet's gates: errors selects today's revision by label and has
// an absolute bound; latency is a baseline gate; broken is a query Prometheus rejects (a range
// function without a range).
const agentGates = `- name: errors
  query: max by (node) (agent_error_ratio{node=~"{{ nodes }}",revision="{{ revision }}"})
  max: 0.05
- name: latency
  query: max by (node) (agent_latency_seconds{node=~"{{ nodes }}"})
  max: 0.5
  baseline: true
- name: broken
  query: rate(agent_error_ratio{node=~"{{ nodes }}"})
  max: 1
`

// agentManifest is the change planned: a new image for the managed DaemonSet.
const agentManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  namespace: agents
spec:
  selector:
    matchLabels: {app: agent}
  updateStrategy: {type: OnDelete}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - {name: agent, image: "agent:2"}
`

// agentCluster is four ready nodes, each running a pod of revision rev1 of the managed DaemonSet
// agents/agent, whose annotations carry agentGates; the manifest keeps them (its annotations are
// merged into the live ones). With marked, namespace agents is marked for node agents.
func agentCluster(marked bool) kubernetes.Interface {
	live := daemonSet(onDelete, func(ds *appsv1.DaemonSet) {
		ds.Namespace = "agents"
		ds.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}}
		ds.Spec.Template.Labels = map[string]string{"app": "agent"}
		ds.Annotations = map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged, rolloutapi.AnnotationAnalysis: agentGates}
	})
	objects := []runtime.Object{live}
	if marked {
		objects = append(objects, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agents", Labels: map[string]string{admission.NodeAgentsLabel: "true"}}})
	}
	for _, name := range []string{"node-0", "node-1", "node-2", "node-3"} {
		objects = append(objects, mkNode(name), mkPod("agents", "agent-"+name, name, daemonPod(live, "rev1", 5*time.Second)))
	}
	return fake.NewClientset(objects...)
}

// runPlanCommand runs `rollout plan -f - ARGS` on client and returns its stdout and exit code.
func runPlanCommand(t *testing.T, client kubernetes.Interface, args ...string) (string, int) {
	t.Helper()
	cmd := NewPlanCommand(func() (kubernetes.Interface, string, error) { return client, "agents", nil })
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as daemonguard's root command does
	var out, errOut bytes.Buffer
	cmd.SetIn(strings.NewReader(agentManifest))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{"-f", "-"}, args...))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	var code exitcode.Error
	switch {
	case err == nil:
		return out.String(), 0
	case errors.As(err, &code):
		return out.String(), code.Code
	}
	t.Fatalf("rollout plan: %v\n%s", err, errOut.String())
	return "", 0
}

// TestPlanChecksGatesAgainstPrometheus: every gate's query runs once against rev1 on the four
// nodes; node-1 already breaks the errors gate, node-3 has no series, latency passes against the
// nodes' own median, and Prometheus' rejection of the broken query is that gate's line.
func TestPlanChecksGatesAgainstPrometheus(t *testing.T) {
	registry := prometheus.NewRegistry()
	// The series carry the namespace label of the pods they were scraped from, as
	// kube-state-metrics' and the Prometheus Operator's do.
	errorRatio := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "agent_error_ratio", Help: "Share of failed records (test)."}, []string{"node", "revision", "namespace"})
	latency := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "agent_latency_seconds", Help: "Handling latency (test)."}, []string{"node", "namespace"})
	registry.MustRegister(errorRatio, latency)
	errorRatio.WithLabelValues("node-0", "rev1", "agents").Set(0.01)
	errorRatio.WithLabelValues("node-1", "rev1", "agents").Set(0.2)
	errorRatio.WithLabelValues("node-2", "rev1", "agents").Set(0.05) // at the bound: passes
	errorRatio.WithLabelValues("node-3", "rev0", "agents").Set(0)    // another revision's series: not today's
	// Another namespace's series: read only where namespace agents is marked for node agents.
	errorRatio.WithLabelValues("node-3", "rev1", "payments").Set(0.9)
	for i, v := range []float64{1.0, 1.2, 1.1, 1.3} { // shared noise, within 0.5 of the median
		latency.WithLabelValues(fmt.Sprintf("node-%d", i), "agents").Set(v)
	}
	exporter := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer exporter.Close()
	prom := promtest.Start(t, promtest.Options{Targets: []promtest.Target{{Job: "agents", URL: exporter.URL + "/metrics"}}})
	prom.WaitForSamples(t, "agent_error_ratio", 5)
	prom.WaitForSamples(t, "agent_latency_seconds", 4)
	client := agentCluster(false)

	start := time.Now()
	table, code := runPlanCommand(t, client, "--prometheus-address", prom.Address())
	t.Logf("plan with the check in %s:\n%s", time.Since(start).Round(time.Millisecond), table)
	if code != exitPlanGates {
		t.Errorf("exit %d, want %d (a gate would not pass today)", code, exitPlanGates)
	}
	for _, want := range []string{
		"analysis check: each gate's query run once against revision rev1 on the 4 nodes that run it (Prometheus " + prom.Address() + "):",
		"gate errors: WOULD FAIL: 1 of 4 nodes out of bounds already (max 0.05): node-1=0.2; no series for 1 of 4 nodes: node-3",
		"gate latency: passes: 4 of 4 nodes within bounds (max 0.5 of the baseline median 1.15 (4 nodes), the nodes measured today as the baseline)",
		"gate broken: NO ANSWER from Prometheus: bad query: the query cannot be kept to namespace agents's series: PromQL does not parse: ",
		"analysis after each wave", // the gates are still listed with the forecast
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q", want)
		}
	}

	out, code := runPlanCommand(t, client, "--prometheus-address", prom.Address(), "-o", "json")
	var doc struct {
		Items []struct {
			Plan struct {
				Analysis AnalysisCheck `json:"analysis"`
			} `json:"plan"`
		} `json:"items"`
		ExitCode int `json:"exitCode"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Items) != 1 {
		t.Fatalf("decode the JSON plan (%v):\n%s", err, out)
	}
	c := doc.Items[0].Plan.Analysis
	if doc.ExitCode != code || code != exitPlanGates || !c.Ran || c.Revision != "rev1" || len(c.Nodes) != 4 || len(c.Gates) != 3 {
		t.Fatalf("exit %d (JSON says %d), check %+v", code, doc.ExitCode, c)
	}
	errorsGate, latencyGate, broken := c.Gates[0], c.Gates[1], c.Gates[2]
	if errorsGate.Result != GateFail || errorsGate.Measured != 3 || fmt.Sprint(errorsGate.OutOfBounds) != "[{node-1 0.2}]" || fmt.Sprint(errorsGate.Missing) != "[node-3]" ||
		errorsGate.Query != `max by (node) (agent_error_ratio{namespace="agents",node=~"node-0|node-1|node-2|node-3",revision="rev1"})` {
		t.Errorf("errors gate %+v", errorsGate)
	}
	if latencyGate.Result != GatePass || latencyGate.Baseline != BaselineToday || latencyGate.Measured != 4 {
		t.Errorf("latency gate %+v", latencyGate)
	}
	if broken.Result != GateError || !strings.Contains(broken.Error, "does not parse") {
		t.Errorf("broken gate %+v", broken)
	}

	// Marked for node agents, the namespace's gates read what they name: the other namespace's
	// series of node-3 too, and Prometheus itself rejects the broken query, by kind only.
	table, _ = runPlanCommand(t, agentCluster(true), "--prometheus-address", prom.Address())
	for _, want := range []string{
		"gate errors: WOULD FAIL: 2 of 4 nodes out of bounds already (max 0.05): node-1=0.2, node-3=0.9",
		"gate broken: NO ANSWER from Prometheus: bad query: Prometheus at " + prom.Address() + " rejected the query (bad_data)",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("in a marked namespace the table lacks %q:\n%s", want, table)
		}
	}
}

// TestPlanSaysPrometheusDidNotAnswer: a Prometheus that cannot be reached is each gate's error
// line and a finding (exit 4), not a failed plan and not a pass.
func TestPlanSaysPrometheusDidNotAnswer(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	out, code := runPlanCommand(t, agentCluster(false), "--prometheus-address", closed.URL, "--prometheus-timeout", "5s")
	if code != exitPlanGates {
		t.Errorf("exit %d, want %d", code, exitPlanGates)
	}
	want := "gate errors: NO ANSWER from Prometheus: unreachable: cannot reach Prometheus at " + closed.URL + " "
	if !strings.Contains(out, want) || !strings.Contains(out, "connection refused") {
		t.Errorf("the plan lacks %q ... connection refused:\n%s", want, out)
	}
}

// TestPlanWithoutPrometheusSaysTheQueriesWereNotRun: without an address the gates are listed,
// the check says it did not run them and how to, and that is no finding.
func TestPlanWithoutPrometheusSaysTheQueriesWereNotRun(t *testing.T) {
	out, code := runPlanCommand(t, agentCluster(false))
	if code != 0 {
		t.Errorf("exit %d, want 0", code)
	}
	for _, want := range []string{"gate errors: 3 measurements 30s apart", "analysis check: the queries of 3 gates (errors, latency, broken) were not run: no --prometheus-address"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan lacks %q:\n%s", want, out)
		}
	}
}

// TestPlanRejectsBadPrometheusFlags: flags the controller would reject stop the plan before it
// reads anything, with the reason.
func TestPlanRejectsBadPrometheusFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--prometheus-address", "prometheus:9090"},
		{"--prometheus-ca-file", "/etc/ca.crt"},
		{"--prometheus-address", "http://127.0.0.1:9090", "--prometheus-bearer-token-file", "/nonexistent/token"},
		{"--prometheus-address", "http://127.0.0.1:9090", "--prometheus-timeout", "-1s"},
	} {
		cmd := NewPlanCommand(func() (kubernetes.Interface, string, error) {
			t.Errorf("%v: the plan reached the cluster", args)
			return nil, "", errors.New("not reached")
		})
		cmd.SetIn(strings.NewReader(agentManifest))
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetErr(new(bytes.Buffer))
		cmd.SetArgs(append([]string{"-f", "-"}, args...))
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "Prometheus") {
			t.Errorf("%v: error %v, want one about Prometheus", args, err)
		}
	}
}
