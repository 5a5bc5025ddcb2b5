package charts

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The chart's monitoring files: the one definition of the alerts, their promtool tests, and the
// Grafana dashboard.
var (
	rulesFile     = filepath.Join(chartDir, "files", "prometheus-rules.yaml")
	rulesTestFile = filepath.Join(chartDir, "files", "prometheus-rules_test.yaml")
	dashboardFile = filepath.Join(chartDir, "files", "grafana-dashboard.json")
)

// ruleGroups is a Prometheus rule file, and the spec of the PrometheusRule made from it.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for,omitempty"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// promtoolTests is the part of a `promtool test rules` file that says which alerts it expects.
type promtoolTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTests []struct {
			Alertname string            `json:"alertname"`
			ExpAlerts []json.RawMessage `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// readYAML decodes a YAML file; strictly, a key into has no field for fails.
func readYAML(t *testing.T, path string, into any, strict bool) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strict {
		err = yaml.UnmarshalStrict(data, into)
	} else {
		err = yaml.Unmarshal(data, into)
	}
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestAlertRulesPassPromtool runs the promtool unit tests of the alert rules. It needs no cluster,
// so -short runs it too.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install Debian's prometheus package (`make testdeps` does as root)")
	}
	// go test caches a result by the files the test opens; promtool reads these in its own process.
	for _, f := range []string{rulesFile, rulesTestFile} {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(t.Context(), promtool, "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = filepath.Dir(rulesTestFile)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", rulesTestFile, err, out)
	}
}

// TestEveryAlertHasAFiringAndAQuietCase: each alert of the rules file has a promtool case that
// expects it to fire and one that expects it not to, and the tests name no alert the file lacks.
func TestEveryAlertHasAFiringAndAQuietCase(t *testing.T) {
	var rules ruleGroups
	readYAML(t, rulesFile, &rules, true) // a mistyped key in a rule would make it mean less
	var tests promtoolTests
	readYAML(t, rulesTestFile, &tests, false) // promtool checks the rest of its file
	if !slices.Equal(tests.RuleFiles, []string{filepath.Base(rulesFile)}) {
		t.Errorf("%s tests rule files %v, want only %s", rulesTestFile, tests.RuleFiles, filepath.Base(rulesFile))
	}
	firing, quiet := map[string]bool{}, map[string]bool{}
	for _, test := range tests.Tests {
		for _, c := range test.AlertRuleTests {
			if len(c.ExpAlerts) > 0 {
				firing[c.Alertname] = true
			} else {
				quiet[c.Alertname] = true
			}
		}
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s has a rule that is not an alert (expr %q)", g.Name, r.Expr)
				continue
			}
			alerts[r.Alert] = true
			if !firing[r.Alert] {
				t.Errorf("%s has no promtool case in which it fires", r.Alert)
			}
			if !quiet[r.Alert] {
				t.Errorf("%s has no promtool case in which it does not fire", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s has severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s lacks a summary or a description", r.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("no alert in %s", rulesFile)
	}
	for name := range firing {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
	for name := range quiet {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
}

// prometheusRule is the part of a monitoring.coreos.com/v1 PrometheusRule the chart sets.
type prometheusRule struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            ruleGroups        `json:"spec"`
}

// TestPrometheusRuleIsTheRulesFile: metrics.prometheusRule.enabled renders one PrometheusRule
// whose spec is the rules file, with its labels and namespace from values; off, none.
func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	var want ruleGroups
	readYAML(t, rulesFile, &want, true)
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			rendered := ofKind(objects(t, render(t, c)), "PrometheusRule")
			if c.golden != "everything" {
				if len(rendered) != 0 {
					t.Fatalf("%d PrometheusRules with metrics.prometheusRule.enabled=false", len(rendered))
				}
				return
			}
			if len(rendered) != 1 {
				t.Fatalf("%d PrometheusRules, want 1", len(rendered))
			}
			var got prometheusRule
			if err := yaml.UnmarshalStrict(rendered[0].YAML, &got); err != nil {
				t.Fatal(err)
			}
			if got.Metadata.Namespace != "monitoring" || got.Metadata.Labels["release"] != "prometheus" {
				t.Errorf("PrometheusRule in namespace %q with labels %v, want namespace monitoring and release: prometheus", got.Metadata.Namespace, got.Metadata.Labels)
			}
			if !equality.Semantic.DeepEqual(got.Spec, want) {
				t.Errorf("the PrometheusRule's spec differs from %s:\n%+v", rulesFile, got.Spec)
			}
		})
	}
}

// TestGrafanaDashboardConfigMap: metrics.grafanaDashboard.enabled renders one ConfigMap with the
// sidecar's label from values and the dashboard file as it is, which is a Grafana dashboard.
func TestGrafanaDashboardConfigMap(t *testing.T) {
	want, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title string `json:"title"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(want, &dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if dashboard.UID == "" || len(dashboard.Panels) == 0 {
		t.Fatalf("%s has uid %q and %d panels, want a uid and panels", dashboardFile, dashboard.UID, len(dashboard.Panels))
	}
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			var dashboards []*corev1.ConfigMap
			for _, cm := range typedObjects[*corev1.ConfigMap](objects(t, render(t, c))) {
				if _, ok := cm.Data["daemonguard.json"]; ok {
					dashboards = append(dashboards, cm)
				}
			}
			if c.golden != "everything" {
				if len(dashboards) != 0 {
					t.Fatalf("%d dashboard ConfigMaps with metrics.grafanaDashboard.enabled=false", len(dashboards))
				}
				return
			}
			if len(dashboards) != 1 {
				t.Fatalf("%d dashboard ConfigMaps, want 1", len(dashboards))
			}
			cm := dashboards[0]
			if cm.Namespace != "grafana" || cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "Kubernetes" {
				t.Errorf("dashboard ConfigMap in namespace %q with labels %v and annotations %v, want namespace grafana, grafana_dashboard: \"1\" and grafana_folder: Kubernetes",
					cm.Namespace, cm.Labels, cm.Annotations)
			}
			if got := cm.Data["daemonguard.json"]; got != string(bytes.TrimRight(want, "\n")) {
				t.Errorf("the ConfigMap's daemonguard.json differs from %s", dashboardFile)
			}
		})
	}
}

// TestDashboardHasTheDefaultSidecarLabel: by default the ConfigMap carries the label the Grafana
// chart's sidecar looks for, so enabling it is enough.
func TestDashboardHasTheDefaultSidecarLabel(t *testing.T) {
	out, err := template(t, "--set", "metrics.grafanaDashboard.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	var labels []map[string]string
	for _, cm := range typedObjects[*corev1.ConfigMap](objects(t, out)) {
		if _, ok := cm.Data["daemonguard.json"]; ok {
			labels = append(labels, cm.Labels)
		}
	}
	if len(labels) != 1 || labels[0]["grafana_dashboard"] != "1" {
		t.Fatalf("dashboard ConfigMaps' labels %v, want one with grafana_dashboard: \"1\"", labels)
	}
}
