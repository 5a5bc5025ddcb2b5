package preflight_test

// The plan as a read-only identity: bound only to the chart's pre-flight roles, rendered by the
// real helm, it makes the same plan as the admin; a missing rule fails it, naming what is
// forbidden.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
)

// testReadOnlyIdentity binds users to the chart's pre-flight roles, rendered by helm, and runs
// the plan as them (impersonated): with both roles it makes the same plan as the admin, and so it
// does with pods listed but not watched; without the pods rule, or without the Role on the policy
// ConfigMaps, it fails and names what is forbidden.
func (c *planCluster) testReadOnlyIdentity(t *testing.T) {
	const ns = "plan-rbac"
	c.freshNamespace(t, ns, false)
	clustertest.Kubectl(t, c.cluster, agent, "apply", "-n", ns, "-f", "-")
	c.waitSettled(t, ns, "agent")
	file := filepath.Join(t.TempDir(), "agent.yaml")
	if err := os.WriteFile(file, []byte(replace("image: agent:1", "image: agent:2")), 0o644); err != nil {
		t.Fatal(err)
	}

	rendered := renderPreflightRBAC(t, `[{"kind":"User","name":"plan-ci"}]`)
	clustertest.Kubectl(t, c.cluster, rendered, "apply", "-f", "-")
	// The same roles with the pods rule taken out, bound to plan-ci-nopods; with pods listed but
	// not watched, bound to plan-ci-nowatch; and the ClusterRole alone bound to plan-ci-nocm.
	const podsRule = "resources: [pods]\n    verbs: [get, list, watch]"
	if !strings.Contains(rendered, podsRule) {
		t.Fatalf("the rendered ClusterRole has no rule %q:\n%s", podsRule, rendered)
	}
	for user, rule := range map[string]string{"nopods": "resources: [events]\n    verbs: [get, list, watch]", "nowatch": "resources: [pods]\n    verbs: [get, list]"} {
		roles := strings.ReplaceAll(strings.ReplaceAll(rendered, "plan-ci", "plan-ci-"+user), "rel-daemonguard-preflight", "rel-daemonguard-preflight-"+user)
		clustertest.Kubectl(t, c.cluster, strings.Replace(roles, podsRule, rule, 1), "apply", "-f", "-")
	}
	noConfigMaps := renderPreflightRBAC(t, `[{"kind":"User","name":"plan-ci-nocm"}]`)
	clustertest.Kubectl(t, c.cluster, strings.ReplaceAll(noConfigMaps, "rel-daemonguard-preflight", "rel-daemonguard-preflight-nocm"), "apply", "-f", "-")
	clustertest.Kubectl(t, c.cluster, "", "delete", "rolebinding", "-n", harness.WebhookNamespace, "rel-daemonguard-preflight-nocm")
	// Nobody may write with these roles: the API server's own answer.
	for _, verb := range []string{"create", "update", "patch", "delete"} {
		for _, resource := range []string{"daemonsets.apps", "pods", "configmaps"} {
			if out := c.canI(t, "plan-ci", verb, resource); out != "no" {
				t.Errorf("plan-ci may %s %s: %s", verb, resource, out)
			}
		}
	}

	admin := c.plan(t, c.cluster.KubeconfigPath, ns, file)
	c.cluster.WaitFor(t, time.Minute, "the read-only identity's plan", func(context.Context) (bool, string) {
		// RBAC reaches the authorizer's cache shortly after the apply.
		_, err := runPlan(impersonating(t, c.cluster.KubeconfigPath, "plan-ci"), ns, file)
		if code := cli.ExitCode(err); code != 0 && code != 3 {
			return false, err.Error()
		}
		return true, ""
	})
	a, _ := json.Marshal(admin)
	// Without watch on pods, client-go lists them instead of streaming them: the same plan.
	for _, user := range []string{"plan-ci", "plan-ci-nowatch"} {
		readOnly := c.plan(t, impersonating(t, c.cluster.KubeconfigPath, user), ns, file)
		if r, _ := json.Marshal(readOnly); !bytes.Equal(a, r) {
			t.Errorf("%s's plan differs from the admin's:\nadmin:     %s\nread-only: %s", user, a, r)
		}
	}

	for user, want := range map[string][]string{
		"plan-ci-nopods": {"list pods", `"plan-ci-nopods" cannot list resource "pods"`},
		"plan-ci-nocm":   {"list policy ConfigMaps in " + harness.WebhookNamespace, `"plan-ci-nocm" cannot list resource "configmaps"`},
	} {
		out, err := runPlan(impersonating(t, c.cluster.KubeconfigPath, user), ns, file)
		if cli.ExitCode(err) != 1 {
			t.Errorf("%s: exit code %d (%v), want 1\n%s", user, cli.ExitCode(err), err, out)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", user, err, w)
			}
		}
	}
}

// canI asks the API server whether user may verb resource in the default namespace.
func (c *planCluster) canI(t *testing.T, user, verb, resource string) string {
	t.Helper()
	// kubectl auth can-i exits 1 when the answer is no: the answer is what it printed.
	return strings.TrimSpace(clustertest.TryKubectl(c.cluster, "", "auth", "can-i", verb, resource, "-n", metav1.NamespaceDefault, "--as", user).Stdout)
}

// renderPreflightRBAC renders the chart's pre-flight roles with the real helm, bound to subjects
// (JSON), for release rel in the webhook's namespace.
func renderPreflightRBAC(t *testing.T, subjects string) string {
	t.Helper()
	bins, err := toolbin.Ensure(context.Background(), io.Discard, "helm")
	if err != nil {
		t.Fatal(err)
	}
	root, err := toolbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(bins.Path("helm"), "template", "rel", filepath.Join(root, "charts", "daemonguard"),
		"--namespace", harness.WebhookNamespace, "--show-only", "templates/preflight-rbac.yaml",
		"--set-json", "preflight.subjects="+subjects)
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return string(out)
}

// impersonating writes a copy of kubeconfig whose user impersonates user, as kubectl --as does.
func impersonating(t *testing.T, kubeconfig, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig-"+user)
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
