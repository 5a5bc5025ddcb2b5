package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"

	"github.com/daemonguard/daemonguard/internal/cli"
)

// TestREADMEHelmTemplatePipeline runs the README's `helm template ... | daemonguard check -f -`
// line as written, where ./chart is a user's chart of one DaemonSet that requires Kubernetes
// 1.30+: no --kube-version is needed, because the helm built from tools/helm reports the
// Kubernetes version of the client-go it is built with, as a release helm does.
func TestREADMEHelmTemplatePipeline(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var line string
	for l := range strings.Lines(string(readme)) {
		if strings.HasPrefix(l, "helm template ") && strings.Contains(l, "| daemonguard check -f -") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		t.Fatal("README has no `helm template ... | daemonguard check -f -` line")
	}
	helmPart, checkPart, _ := strings.Cut(line, "|")
	helmArgs, checkArgs := strings.Fields(helmPart)[1:], strings.Fields(checkPart)
	if checkArgs[0] != "daemonguard" || strings.Contains(checkPart, "#") {
		t.Fatalf("README line %q: want `helm template ... | daemonguard ...` and no comment", line)
	}

	work := t.TempDir()
	chart, err := filepath.Abs(filepath.Join("testdata", "node-agent"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(chart, filepath.Join(work, "chart")); err != nil {
		t.Fatal(err)
	}
	rendered, err := runHelmIn(t, work, helmArgs...)
	if err != nil {
		t.Fatal(err)
	}

	cmd := cli.New()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(bytes.NewReader(rendered))
	cmd.SetArgs(checkArgs[1:])
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("daemonguard %s: %v\n%s", strings.Join(checkArgs[1:], " "), err, out.String())
	}
	var reports []struct {
		Kind, Name string
		Allowed    bool
	}
	if err := json.Unmarshal(out.Bytes(), &reports); err != nil {
		t.Fatalf("check -o json printed no JSON: %v\n%s", err, out.String())
	}
	if len(reports) != 1 || reports[0].Kind != "DaemonSet" || !strings.HasSuffix(reports[0].Name, "-node-agent") || !reports[0].Allowed {
		t.Errorf("reports %+v, want the chart's DaemonSet checked and allowed", reports)
	}

	// The version helm reports is the one of the client-go helm is built with.
	want := "v1." + clientGoMinor(t) + ".0"
	if got := `example.com/rendered-for: "` + want + `"`; !bytes.Contains(rendered, []byte(got)) {
		t.Errorf("the render lacks %s:\n%s", got, rendered)
	}
}

// TestChartRendersWithoutKubeVersion: `helm template` without --kube-version renders the
// daemonguard chart, whose kubeVersion range holds the version helm then reports (that of the
// client-go it is built with).
func TestChartRendersWithoutKubeVersion(t *testing.T) {
	out, err := runHelm(t, "template", "--namespace", namespace, releaseName, chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, []byte("kind: MutatingWebhookConfiguration")) {
		t.Errorf("the render has no MutatingWebhookConfiguration:\n%s", out)
	}
}

// clientGoMinor returns N of the k8s.io/client-go v0.N.P that tools/helm builds with.
func clientGoMinor(t *testing.T) string {
	t.Helper()
	path := filepath.Join("..", "tools", "helm", "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.ParseLax(path, data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range f.Require {
		if r.Mod.Path == "k8s.io/client-go" {
			if parts := strings.Split(r.Mod.Version, "."); len(parts) == 3 {
				return parts[1]
			}
		}
	}
	t.Fatalf("%s requires no k8s.io/client-go v0.N.P", path)
	return ""
}
