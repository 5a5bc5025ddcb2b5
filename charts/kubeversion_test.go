package charts

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/version"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/kubesupport"
)

// TestChartKubeVersionIsTheSupportedRange holds the chart's kubeVersion to the range
// internal/kubesupport decides by, so the binary and the chart cannot drift apart. The -0 on
// both bounds lets providers' prerelease-style versions (v1.34.4-eks-abc) match.
func TestChartKubeVersionIsTheSupportedRange(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		KubeVersion string `json:"kubeVersion"`
	}
	if err := yaml.Unmarshal(raw, &chart); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(">=1.%d.0-0 <1.%d.0-0", kubesupport.OldestMinor, kubesupport.NewestMinor+1)
	if chart.KubeVersion != want {
		t.Errorf("Chart.yaml kubeVersion %q, want %q (kubesupport supports %s)", chart.KubeVersion, want, kubesupport.Range)
	}
}

// TestInProcessHelperAsksForTheGeneratedAPI reads the chart's in-process injection helper: the
// API it looks for in helm's capabilities must be the one internal/inprocess generates
// (kubesupport.MutatingAdmissionPolicyAPI), and the v1beta1 it names in its refusal the one
// kubesupport.Read looks for.
func TestInProcessHelperAsksForTheGeneratedAPI(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "templates", "_helpers.tpl"))
	if err != nil {
		t.Fatal(err)
	}
	const start = `{{- define "daemonguard.webhook.inProcessInjection" -}}`
	_, helper, ok := strings.Cut(string(raw), start)
	if !ok {
		t.Fatalf("_helpers.tpl has no %s", start)
	}
	helper, _, _ = strings.Cut(helper, "{{- define ")
	var asked []string
	for _, m := range regexp.MustCompile(`\.Capabilities\.APIVersions\.Has "([^"]*)"`).FindAllStringSubmatch(helper, -1) {
		asked = append(asked, m[1])
	}
	want := []string{
		kubesupport.MutatingAdmissionPolicyAPI + "/MutatingAdmissionPolicy",
		"admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy",
	}
	if !slices.Equal(asked, want) {
		t.Errorf("the in-process helper asks helm for %q, want %q", asked, want)
	}
}

// TestKubeVersionRange: helm refuses a cluster outside the supported range with its own
// message, before rendering anything, and renders both ends of the range.
func TestKubeVersionRange(t *testing.T) {
	constraint := fmt.Sprintf(">=1.%d.0-0 <1.%d.0-0", kubesupport.OldestMinor, kubesupport.NewestMinor+1)
	cases := map[string]struct {
		version string // --kube-version
		refused bool   // helm refuses the chart
	}{
		"the minor before the oldest supported is refused": {version: fmt.Sprintf("1.%d.0", kubesupport.OldestMinor-1), refused: true},
		"the oldest supported minor renders":               {version: fmt.Sprintf("1.%d.0", kubesupport.OldestMinor)},
		"the last patch of the newest minor renders":       {version: fmt.Sprintf("1.%d.99", kubesupport.NewestMinor)},
		"the minor after the newest supported is refused":  {version: fmt.Sprintf("1.%d.0", kubesupport.NewestMinor+1), refused: true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, "template", "--namespace", namespace, releaseName, chartDir, "--kube-version", c.version)
			if !c.refused {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			want := fmt.Sprintf("chart requires kubeVersion: %s which is incompatible with Kubernetes v%s", constraint, c.version)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("error %v, want %q; rendered:\n%.200s", err, want, out)
			}
		})
	}
}

// TestInProcessInjectionByServer: what each webhook.inProcessInjection renders on a server with
// and without MutatingAdmissionPolicy v1. true without it fails with the message the binary
// gives for the same server (kubesupport.Server.InProcessInjection), so nothing is half-applied.
func TestInProcessInjectionByServer(t *testing.T) {
	const v1beta1 = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
	cases := map[string]struct {
		mode    string   // webhook.inProcessInjection
		version string   // --kube-version
		apis    []string // --api-versions: what the server's discovery lists
		// refusal is the server kubesupport would read, whose InProcessInjection message helm must
		// fail with; nil: the chart renders.
		refusal *kubesupport.Server
		// inProcess says the policy and binding are rendered instead of the DaemonSet mutating
		// webhook.
		inProcess bool
	}{
		"true on 1.34 without the API fails with the message": {
			mode: "true", version: "1.34.4",
			refusal: &kubesupport.Server{},
		},
		"true on 1.35 serving only v1beta1 fails and says daemonguard does not generate it": {
			mode: "true", version: "1.35.2", apis: []string{v1beta1},
			refusal: &kubesupport.Server{MutatingAdmissionPolicyV1beta1: true},
		},
		"true on the oldest supported minor fails with the message": {
			mode: "true", version: fmt.Sprintf("1.%d.13", kubesupport.OldestMinor),
			refusal: &kubesupport.Server{},
		},
		"true on 1.36 with the API renders the policy": {
			mode: "true", version: "1.36.0", apis: []string{mutatingAdmissionPolicyV1}, inProcess: true,
		},
		"true on 1.37 with the API renders the policy": {
			mode: "true", version: kubeVersion, apis: []string{mutatingAdmissionPolicyV1}, inProcess: true,
		},
		"auto on 1.34 renders the DaemonSet mutating webhook": {
			mode: "auto", version: "1.34.4",
		},
		"auto on 1.35 serving only v1beta1 renders the DaemonSet mutating webhook": {
			mode: "auto", version: "1.35.2", apis: []string{v1beta1},
		},
		"auto on 1.37 with the API renders the policy": {
			mode: "auto", version: kubeVersion, apis: []string{mutatingAdmissionPolicyV1}, inProcess: true,
		},
		"false on 1.37 with the API renders the DaemonSet mutating webhook": {
			mode: "false", version: kubeVersion, apis: []string{mutatingAdmissionPolicyV1},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			args := []string{"template", "--namespace", namespace, releaseName, chartDir,
				"--kube-version", c.version, "--set", "webhook.inProcessInjection=" + c.mode}
			for _, api := range c.apis {
				args = append(args, "--api-versions", api)
			}
			out, err := runHelm(t, args...)
			if c.refusal != nil {
				server := *c.refusal
				server.Version = kubesupport.FromVersion(&version.Info{GitVersion: "v" + c.version}).Version
				want := "webhook.inProcessInjection is true, but " + server.InProcessInjection().Error()
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("error %v, want %q; rendered:\n%.200s", err, want, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			assertInjectionPath(t, objects(t, out), c.inProcess)
		})
	}
}

// assertInjectionPath checks that exactly one of the two injection paths is rendered: the
// MutatingAdmissionPolicy and its binding (inProcess, and the webhook told their name), or the
// DaemonSet mutating webhook.
func assertInjectionPath(t *testing.T, objs []object, inProcess bool) {
	t.Helper()
	policies := typedObjects[*admissionregistrationv1.MutatingAdmissionPolicy](objs)
	bindings := typedObjects[*admissionregistrationv1.MutatingAdmissionPolicyBinding](objs)
	var webhooks []string
	for _, w := range only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs).Webhooks {
		webhooks = append(webhooks, w.Name)
	}
	told := false
	for _, d := range typedObjects[*appsv1.Deployment](objs) {
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			told = told || strings.HasPrefix(a, "--in-process-injection-policy=")
		}
	}
	want := []string{"daemonsets.mutate.daemonguard.io", "pods.mutate.daemonguard.io"}
	if inProcess {
		want = want[1:]
	}
	if !slices.Equal(webhooks, want) {
		t.Errorf("mutating webhooks %q, want %q", webhooks, want)
	}
	wantN := 0
	if inProcess {
		wantN = 1
	}
	if len(policies) != wantN || len(bindings) != wantN {
		t.Errorf("rendered %d MutatingAdmissionPolicies and %d bindings, want %d each", len(policies), len(bindings), wantN)
	}
	if told != inProcess {
		t.Errorf("the webhook is told of an in-process injection policy: %t, want %t", told, inProcess)
	}
}
