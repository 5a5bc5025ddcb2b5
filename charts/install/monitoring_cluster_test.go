package install

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/promtest"
)

// TestAlertsAndDashboardOnRealMetrics installs the chart, runs the webhook and the controller on
// the host as its Deployments, and has a real Prometheus scrape both as the chart's
// ServiceMonitors do: over HTTPS with the token of a ServiceAccount bound to the chart's
// metrics-reader ClusterRole, the webhook's certificate verified against the CA of its TLS Secret
// under the Service's name, the controller's self-signed one not verified (insecureSkipVerify, as
// its ServiceMonitor), the controller's labels honored; each target carries the namespace and pod
// labels Kubernetes discovery would give it. Prometheus evaluates the chart's rule file every
// second. Real traffic follows: DaemonSet creates that are patched and allowed, one the
// rolling_update_budget policy denies, the pods they make, and a managed rollout that completes
// and then fails on an image that cannot be pulled. Then:
//
//   - every expression of every panel of the chart's Grafana dashboard returns a sample that is
//     a number (not NaN);
//   - every rule of the rule file is loaded and evaluated with health ok and no error;
//   - every rule's expression returns such a sample once its thresholds are taken away
//     (withoutThresholds: comparisons made bool comparisons, unless reduced to its left operand,
//     absent(x) to x; joins kept), and every series selector in it, without its offset, selects
//     series: an operand with no data before a day of history (DaemonguardDenialsRising's
//     comparison with the day before) is thus checked to select a series that exists, while the
//     rule's own branch for a young Prometheus carries the data;
//   - DaemonguardRolloutFailed fires for the failed rollout, labelled with its DaemonSet, and no
//     other alert is pending or firing.
func TestAlertsAndDashboardOnRealMetrics(t *testing.T) {
	ctx := context.Background()
	// The webhook path for injection, so that mutate-daemonset answers (and patches) the creates.
	r := installChart(t, "dg-mon", "webhook.inProcessInjection=false")
	web := r.runWebhook(r.webhookPort)
	ctl := r.runComponent("controller")

	dir := t.TempDir()
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	caPEM, serverName := r.webhookMetricsCA()
	for path, content := range map[string][]byte{tokenFile: []byte(r.token(scraper)), caFile: caPEM} {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rulesFile := toolbin.RepoPath(t, "charts", "daemonguard", "files", "prometheus-rules.yaml")
	prom := promtest.Start(t, promtest.Options{
		Targets: []promtest.Target{
			{
				Job: "webhook", URL: "https://" + web.MetricsAddr + serving.MetricsPath,
				CAFile: caFile, ServerName: serverName, BearerTokenFile: tokenFile,
				Labels: map[string]string{"namespace": r.Namespace, "pod": r.object("Deployment", "webhook").GetName() + "-0"},
			},
			{
				Job: "controller", URL: "https://" + ctl.MetricsAddr + serving.MetricsPath,
				InsecureSkipVerify: true, BearerTokenFile: tokenFile, HonorLabels: true,
				Labels: map[string]string{"namespace": r.Namespace, "pod": r.object("Deployment", "controller").GetName() + "-0"},
			},
		},
		RuleFiles: []string{rulesFile},
		Interval:  time.Second,
	})
	if err := prom.WaitForTargetsUp(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}

	ns := cluster.NewTestNamespace(t)
	waitAdmission(t, ns)
	const agent = "node-agent"
	makeTraffic(t, prom, ns, agent)

	t.Run("DaemonguardRolloutFailed fires for the failed rollout, and only it", func(t *testing.T) {
		var active []promv1.Alert
		cluster.WaitFor(t, time.Minute, "DaemonguardRolloutFailed firing for "+ns+"/"+agent, func(ctx context.Context) (bool, string) {
			alerts, err := prom.API().Alerts(ctx)
			if err != nil {
				return false, err.Error()
			}
			active = alerts.Alerts
			for _, a := range active {
				if a.Labels["alertname"] == "DaemonguardRolloutFailed" && a.State == promv1.AlertStateFiring &&
					a.Labels["namespace"] == model.LabelValue(ns) && a.Labels["name"] == agent {
					return true, ""
				}
			}
			return false, fmt.Sprintf("active alerts: %v", active)
		})
		// Everything else is healthy: a rule pending or firing now misreads healthy metrics. The
		// controller watches every namespace, so rollouts other tests of the package left (a
		// rollout Progressing, which DaemonguardRolloutStuck watches) are not this test's.
		for _, a := range active {
			if _, rollout := a.Labels["name"]; rollout && a.Labels["namespace"] != model.LabelValue(ns) {
				continue
			}
			if a.Labels["alertname"] != "DaemonguardRolloutFailed" {
				t.Errorf("alert %s is %s on a healthy install: %v", a.Labels["alertname"], a.State, a.Labels)
			}
		}
	})

	t.Run("every dashboard panel returns data", func(t *testing.T) {
		var checks []promCheck
		for _, p := range dashboardPanels(t) {
			for _, target := range p.Targets {
				checks = append(checks, promCheck{name: fmt.Sprintf("panel %q, target %s", p.Title, target.RefID), expr: target.Expr})
			}
		}
		if len(checks) < 10 {
			t.Fatalf("found %d panel expressions in the dashboard; reading it went wrong", len(checks))
		}
		waitForData(t, prom, checks, time.Minute)
	})

	rules := ruleFileRules(t, rulesFile)
	t.Run("every rule is evaluated without error", func(t *testing.T) {
		var evaluated map[string]promv1.AlertingRule
		cluster.WaitFor(t, time.Minute, "Prometheus evaluates every rule of the chart", func(ctx context.Context) (bool, string) {
			got, err := prom.API().Rules(ctx, nil)
			if err != nil {
				return false, err.Error()
			}
			evaluated = map[string]promv1.AlertingRule{}
			for _, g := range got.Groups {
				for _, rule := range g.Rules {
					if a, ok := rule.(promv1.AlertingRule); ok {
						evaluated[a.Name] = a
					}
				}
			}
			for _, rule := range rules {
				if a, ok := evaluated[rule.Alert]; !ok || a.Health == promv1.RuleHealthUnknown || a.LastEvaluation.IsZero() {
					return false, rule.Alert + " not evaluated yet"
				}
			}
			return true, ""
		})
		if len(evaluated) != len(rules) {
			t.Errorf("Prometheus has %d alerting rules, the rule file %d", len(evaluated), len(rules))
		}
		for _, rule := range rules {
			if a := evaluated[rule.Alert]; a.Health != promv1.RuleHealthGood || a.LastError != "" {
				t.Errorf("rule %s (%s): health %q, last error %q", rule.Alert, rule.Expr, a.Health, a.LastError)
			}
		}
	})

	t.Run("every rule expression returns data without its thresholds", func(t *testing.T) {
		var checks []promCheck
		for _, rule := range rules {
			expr, err := withoutThresholds(rule.Expr)
			if err != nil {
				t.Fatalf("rule %s: %v", rule.Alert, err)
			}
			checks = append(checks, promCheck{name: "rule " + rule.Alert + " without thresholds", expr: expr})
			sels, err := selectors(rule.Expr)
			if err != nil {
				t.Fatalf("rule %s: %v", rule.Alert, err)
			}
			for _, sel := range sels {
				checks = append(checks, promCheck{name: "rule " + rule.Alert + ", selector", expr: sel})
			}
		}
		waitForData(t, prom, checks, time.Minute)
	})
}

// makeTraffic makes every series the dashboard and the rules read exist, with real requests: a
// managed DaemonSet created in the node-agent namespace ns (mutate-daemonset patches it,
// validate-daemonset allows it, mutate-pod pins its pods), a DaemonSet the rolling_update_budget
// policy denies, and the managed DaemonSet's rollout to an image that cannot be pulled, which the
// controller starts (deleting a pod) and halts (PodFailure). It waits through Prometheus for the
// rollout to complete before the bad image, and to fail after it.
func makeTraffic(t *testing.T, prom *promtest.Server, ns, agent string) {
	t.Helper()
	ctx := context.Background()
	managed := agentDaemonSet(agent)
	managed.Annotations = map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged}
	managed.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	managed.Spec.Template.Spec.Containers[0].Image = "nginx:1.25.5"
	created, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, managed, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.Template.Spec.PriorityClassName == "" {
		t.Fatalf("the managed DaemonSet was stored without the injection: %+v", created.Spec.Template.Spec)
	}

	wide := agentDaemonSet("too-wide")
	wide.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("100%"))}}
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, wide, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "rolling_update_budget") {
		t.Fatalf("a DaemonSet with maxUnavailable 100%%: err = %v, want a rolling_update_budget denial", err)
	}

	phase := func(p rolloutapi.Phase) string {
		return fmt.Sprintf(`daemonguard_rollout_phase{namespace=%q, name=%q, phase=%q} == 1`, ns, agent, p)
	}
	prom.WaitForSamples(t, phase(rolloutapi.PhaseComplete), 1)
	// nginx:1.91 is the image the local cluster's kubelets cannot pull (ImagePullBackOff): the
	// controller replaces one pod and halts the rollout on its failure.
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"nginx:1.91"}]}}}}`)
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Patch(ctx, agent, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	prom.WaitForSamples(t, phase(rolloutapi.PhaseFailed), 1)
}

// promCheck is a PromQL expression that must return data, and what to call it in a failure.
type promCheck struct{ name, expr string }

// waitForData polls every check until each has returned a sample that is a number, and fails the
// test for each that has not within timeout, with its last answer.
func waitForData(t *testing.T, prom *promtest.Server, checks []promCheck, timeout time.Duration) {
	t.Helper()
	last := map[int]string{}
	for i := range checks {
		last[i] = "not queried"
	}
	deadline := time.Now().Add(timeout)
	for len(last) > 0 && time.Now().Before(deadline) {
		for i := range last {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			v, err := prom.Query(ctx, checks[i].expr)
			cancel()
			switch {
			case err != nil:
				last[i] = err.Error()
			case numbers(v) > 0:
				delete(last, i)
			default:
				last[i] = fmt.Sprintf("no sample that is a number: %v", v)
			}
		}
		if len(last) > 0 {
			select {
			case <-t.Context().Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	for i, answer := range last {
		t.Errorf("%s: %s returns no data after %s; last answer: %s", checks[i].name, checks[i].expr, timeout, answer)
	}
}

// numbers counts the samples of v that are numbers, not NaN.
func numbers(v model.Value) int {
	n := 0
	switch v := v.(type) {
	case model.Vector:
		for _, s := range v {
			if !math.IsNaN(float64(s.Value)) {
				n++
			}
		}
	case model.Matrix:
		for _, s := range v {
			for _, p := range s.Values {
				if !math.IsNaN(float64(p.Value)) {
					n++
				}
			}
		}
	case *model.Scalar:
		if !math.IsNaN(float64(v.Value)) {
			n++
		}
	}
	return n
}

// dashboardPanel is the part of a Grafana panel the test reads; rows hold panels of their own.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"`
}

// dashboardPanels returns every panel of the chart's dashboard, those in rows included.
func dashboardPanels(t *testing.T) []dashboardPanel {
	t.Helper()
	data, err := os.ReadFile(toolbin.RepoPath(t, "charts", "daemonguard", "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dashboard); err != nil {
		t.Fatal(err)
	}
	var all []dashboardPanel
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			all = append(all, p)
			walk(p.Panels)
		}
	}
	walk(dashboard.Panels)
	return all
}

// fileRule is an alerting rule of a Prometheus rule file.
type fileRule struct {
	Alert string `json:"alert"`
	Expr  string `json:"expr"`
}

// ruleFileRules returns the rules of a Prometheus rule file; the chart's has alerting rules only.
func ruleFileRules(t *testing.T, path string) []fileRule {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert  string `json:"alert"`
				Record string `json:"record"`
				Expr   string `json:"expr"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var rules []fileRule
	for _, g := range file.Groups {
		for _, rule := range g.Rules {
			if rule.Alert == "" {
				t.Fatalf("%s has a rule that is not an alert (record %q): the test checks alerting rules", path, rule.Record)
			}
			rules = append(rules, fileRule{Alert: rule.Alert, Expr: rule.Expr})
		}
	}
	if len(rules) == 0 {
		t.Fatalf("%s has no rules", path)
	}
	return rules
}
