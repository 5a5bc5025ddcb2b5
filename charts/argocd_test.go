package charts

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestArgoCDApplicationRendersTheChart renders the chart with the helm values of the Argo CD
// Application in testdata/argocd, the way Argo CD's helm template would, so the example cannot
// drift from the chart's values schema; and it checks the Application ignores the caBundle of the
// very webhook configurations the chart renders for that release.
func TestArgoCDApplicationRendersTheChart(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "testdata", "argocd", "application.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var app struct {
		Spec struct {
			Destination struct{ Namespace string }
			Sources     []struct {
				Path string
				Helm *struct {
					ReleaseName  string         `json:"releaseName"`
					ValuesObject map[string]any `json:"valuesObject"`
				}
			}
			IgnoreDifferences []struct{ Kind, Name string } `json:"ignoreDifferences"`
		}
	}
	if err := yaml.Unmarshal(raw, &app); err != nil {
		t.Fatal(err)
	}
	rendered := 0
	for _, src := range app.Spec.Sources {
		if src.Helm == nil {
			continue
		}
		values, err := yaml.Marshal(src.Helm.ValuesObject)
		if err != nil {
			t.Fatal(err)
		}
		valuesPath := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(valuesPath, values, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := runHelm(t, "template", "--namespace", app.Spec.Destination.Namespace, src.Helm.ReleaseName, chartDir,
			"--kube-version", kubeVersion, "--values", valuesPath)
		if err != nil {
			t.Fatalf("the Application's values for %s do not render: %v", src.Path, err)
		}
		rendered++
		ignored := map[string]bool{}
		for _, d := range app.Spec.IgnoreDifferences {
			ignored[d.Kind+"/"+d.Name] = true
		}
		for _, o := range objects(t, out) {
			if (o.Kind == "MutatingWebhookConfiguration" || o.Kind == "ValidatingWebhookConfiguration") && !ignored[o.Kind+"/"+o.Name] {
				t.Errorf("the Application does not ignore the caBundle of %s %s", o.Kind, o.Name)
			}
		}
	}
	if rendered == 0 {
		t.Fatal("the Application has no helm source for the chart")
	}
}
