package charts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

const openReportsCRDFile = "daemonguard/files/openreports.io_reports.yaml"

// The chart's copy of the OpenReports CRD is the one of the reports-api module go.mod pins, byte
// for byte: the Go types the audit writes and the schema the API server checks them against
// cannot drift apart.
func TestOpenReportsCRDIsThePinnedModules(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "github.com/openreports/reports-api").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/openreports/reports-api: %v", err)
	}
	version, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if dir == "" {
		t.Fatalf("github.com/openreports/reports-api %s is not in the module cache (go mod download)", version)
	}
	want, err := os.ReadFile(filepath.Join(dir, "config", "crd", "openreports.io_reports.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(openReportsCRDFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from reports-api %s's config/crd/openreports.io_reports.yaml; copy it again", openReportsCRDFile, version)
	}
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ReplaceAll(string(values), "\n  # ", " "), "reports-api "+version) {
		t.Errorf("values.yaml (openReports.installCRD) does not name reports-api %s", version)
	}
}

// With openReports.enabled the webhook gets --open-reports and, with installCRD, the CRD is
// rendered unchanged but for daemonguard's labels and the keep policy; without, neither.
func TestOpenReportsRenders(t *testing.T) {
	raw, err := os.ReadFile(openReportsCRDFile)
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, render(t, c))
			crds := ofKind(objs, "CustomResourceDefinition")
			switch {
			case !c.openReportsCRD && len(crds) != 0:
				t.Errorf("rendered %d CRDs, want none", len(crds))
			case c.openReportsCRD && (len(crds) != 1 || crds[0].Name != "reports.openreports.io"):
				t.Errorf("rendered CRDs %v, want reports.openreports.io", crds)
			case c.openReportsCRD:
				var got map[string]any
				if err := yaml.Unmarshal(crds[0].YAML, &got); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(got["spec"], file["spec"]) {
					t.Errorf("the rendered CRD's spec differs from %s", openReportsCRDFile)
				}
				meta, _ := got["metadata"].(map[string]any)
				annotations, _ := meta["annotations"].(map[string]any)
				if annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("CRD annotations %v lack helm.sh/resource-policy: keep", annotations)
				}
			}
			for _, d := range typedObjects[*appsv1.Deployment](objs) {
				if d.Labels["app.kubernetes.io/component"] != "webhook" {
					continue
				}
				args := d.Spec.Template.Spec.Containers[0].Args
				if got := slices.Contains(args, "--open-reports=true"); got != c.openReports {
					t.Errorf("webhook args %v: --open-reports=true is %v, want %v", args, got, c.openReports)
				}
			}
		})
	}
}

// Reports without the audit that writes them would be a silent no-op: the render fails instead.
func TestOpenReportsNeedTheAudit(t *testing.T) {
	_, err := template(t, "--set", "openReports.enabled=true", "--set-string", "webhook.auditInterval=0")
	if err == nil || !strings.Contains(err.Error(), "openReports.enabled needs the audit that writes the Reports") {
		t.Fatalf("helm template with openReports.enabled and auditInterval 0: %v, want the render to fail naming both", err)
	}
}
