package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daemonguard/daemonguard/internal/audit"
	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// DaemonSets created before daemonguard was installed are found by the audit: the seed lacks the
// injected tolerations, the wide budget violates a deny policy. The one-shot CLI reports both and
// exits non-zero; once the webhook runs, its periodic audit puts Events on both DaemonSets.
func TestAuditFindsDaemonSetsCreatedBeforeInstall(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	ctx := context.Background()
	for _, f := range []string{clustertest.SeedManifest(t), toolbin.RepoPath(t, "testdata", "demo-policy", "wide-budget.yaml")} {
		clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", f)
	}

	// One-shot audit through the library.
	c, err := client.New(cluster.RESTConfig, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.CompileDirs(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	findings, err := audit.Run(ctx, c, set, []string{metav1.NamespaceSystem})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]audit.Finding{}
	for _, f := range findings {
		if f.Namespace == ns {
			byName[f.Name] = f
		}
	}
	seed, wide := byName["nginx-ds"], byName["log-shipper"]
	if !seed.MissingInjection || len(seed.Violations) != 0 || seed.Denied() {
		t.Errorf("seed finding = %+v, want missing injection and no violation", seed)
	}
	if !wide.Denied() || wide.Violations[0].Policy != "rolling_update_budget" {
		t.Errorf("wide-budget finding = %+v, want a rolling_update_budget denial", wide)
	}

	// The CLI, as an operator runs it against the current kubeconfig.
	var out bytes.Buffer
	cmd := cli.New()
	cmd.SetArgs([]string{"audit", "--kubeconfig", cluster.KubeconfigPath, "-o", "json"})
	cmd.SetOut(&out)
	err = cmd.ExecuteContext(ctx)
	if !cli.IsReported(err) {
		t.Fatalf("audit with a deny-level finding returned %v, want the denial exit", err)
	}
	var fromCLI []audit.Finding
	if err := json.Unmarshal(out.Bytes(), &fromCLI); err != nil {
		t.Fatalf("audit -o json printed invalid JSON: %v\n%s", err, out.String())
	}
	if len(fromCLI) != len(findings) {
		t.Errorf("CLI reported %d findings, library %d", len(fromCLI), len(findings))
	}

	// The periodic audit in the webhook process reports Events on the DaemonSets themselves.
	hook, err := harness.StartWebhook(ctx, cluster, harness.Options{AuditInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer hook.Stop()
	want := map[string]string{"nginx-ds": "InjectionMissing", "log-shipper": "PolicyViolation"}
	cluster.WaitFor(t, time.Minute, "audit Events on both DaemonSets", func(ctx context.Context) (bool, string) {
		evs, err := cluster.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		seen := map[string]bool{}
		for _, e := range evs.Items {
			if want[e.Regarding.Name] == e.Reason && e.Regarding.Kind == "DaemonSet" {
				seen[e.Regarding.Name] = true
				if e.Reason == "PolicyViolation" && !strings.Contains(e.Note, "[rolling_update_budget]") {
					return false, "violation event does not name the policy: " + e.Note
				}
			}
		}
		return len(seen) == 2, "events seen for " + strings.Join(keys(seen), ",")
	})
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
