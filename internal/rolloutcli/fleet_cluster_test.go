package rolloutcli_test

// `rollout status` and `rollout plan` over several kube contexts, for real: the local control
// plane is reached under two contexts (east, west), a third (nobody) impersonates a user without
// any permission, and a fourth (down) points at a port where nothing listens. The two contexts
// of the one cluster must report the same, and each failing context be its own row, not the end
// of the fleet.

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/internal/preflight"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

func TestFleetOverContexts(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	seed := clustertest.SeedObject(t)
	image := seed.Spec.Template.Spec.Containers[0].Image
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", clustertest.SeedManifest(t))
	clustertest.WaitDaemonSet(t, cluster, ns, seed.Name, 2*time.Minute, "the seed rolled out", clustertest.RolledOut(image, 4, false))
	hash := currentHash(t, ns, seed.Name, 1)
	kubeconfig := fleetKubeconfig(t, ns)

	// status: east and west are the same cluster and say the same; nobody and down are lines
	// with their errors, and the fleet exits 1.
	out, err := runFleet(t, kubeconfig, "status", "ds/"+seed.Name, "--contexts", "east,nobody,down,west")
	t.Logf("rollout status --contexts east,nobody,down,west:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code := cli.ExitCode(err); code != 1 || len(lines) != 5 {
		t.Fatalf("status over the fleet: exit %d (%v), want 1 and five lines:\n%s", code, err, out)
	}
	for i, want := range []struct {
		columns []string // context, revision, phase, updated
		has     string   // in the message
	}{
		{[]string{"east", hash, "Complete", "4/4"}, `daemon set "nginx-ds" successfully rolled out`},
		{[]string{"nobody", "-", "Error", "-"}, `get daemon set ` + ns + `/nginx-ds: daemonsets.apps "nginx-ds" is forbidden: User "fleet-nobody" cannot get resource "daemonsets"`},
		{[]string{"down", "-", "Error", "-"}, "dial tcp 127.0.0.1:1: connect: connection refused"},
		{[]string{"west", hash, "Complete", "4/4"}, `daemon set "nginx-ds" successfully rolled out`},
	} {
		line := lines[i+1]
		if f := strings.Fields(line); len(f) < 4 || !slices.Equal(f[:4], want.columns) || !strings.Contains(line, want.has) {
			t.Errorf("line %q, want it to start %q and hold %q", line, want.columns, want.has)
		}
	}
	if out, err := runFleet(t, kubeconfig, "status", "ds/"+seed.Name, "--contexts", "east,west"); err != nil {
		t.Errorf("status of two complete clusters: %v\n%s", err, out)
	}

	// plan: a new image replaces the pod on every node of east and west, the same plan twice;
	// nobody and down could not be planned, and the fleet exits 1.
	manifest := clustertest.SeedYAML(t, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "nginx:1.9.1" })
	file := filepath.Join(t.TempDir(), "ds.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runFleet(t, kubeconfig, "plan", "-f", file, "-o", "json", "--contexts", "east,nobody,down,west")
	var doc struct {
		Clusters []preflight.ClusterPlan `json:"clusters"`
		ExitCode int                     `json:"exitCode"`
	}
	if jerr := json.Unmarshal([]byte(out), &doc); jerr != nil || cli.ExitCode(err) != 1 || doc.ExitCode != 1 || len(doc.Clusters) != 4 {
		t.Fatalf("plan over the fleet: exit %d (%v), decode %v:\n%s", cli.ExitCode(err), err, jerr, out)
	}
	east, nobody, down, west := doc.Clusters[0], doc.Clusters[1], doc.Clusters[2], doc.Clusters[3]
	for _, p := range []preflight.ClusterPlan{east, west} {
		if p.Error != "" || p.ExitCode != 0 || len(p.Items) != 1 || p.Items[0].Plan == nil || p.Items[0].Plan.Summary.Replaced != 4 {
			t.Errorf("the plan of %s: %+v", p.Context, p)
		}
	}
	if e, w := mustJSON(t, east.Items), mustJSON(t, west.Items); e != w {
		t.Errorf("one cluster under two contexts, two plans:\n%s\n%s", e, w)
	}
	if !strings.Contains(nobody.Error, `User "fleet-nobody" cannot list resource "nodes"`) || nobody.ExitCode != 1 {
		t.Errorf("the plan of nobody: %+v", nobody)
	}
	if !strings.Contains(down.Error, "connection refused") || down.ExitCode != 1 {
		t.Errorf("the plan of down: %+v", down)
	}

	// The markdown for a pull request: a row per cluster, no full plan of a cluster without a
	// finding.
	out, err = runFleet(t, kubeconfig, "plan", "-f", file, "-o", "markdown", "--contexts", "east,down")
	t.Logf("rollout plan -o markdown --contexts east,down:\n%s", out)
	for _, want := range []string{"### daemonguard rollout plan over 2 clusters", "| east | " + ns + "/nginx-ds | 0 | 0 | 4 | 0 | 0 | - | - | 0 | new revision |", "| down | - |"} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q (exit %d):\n%s", want, cli.ExitCode(err), out)
		}
	}
	if strings.Contains(out, "<details>") {
		t.Errorf("markdown folds the plan of a cluster without a finding:\n%s", out)
	}
}

// fleetKubeconfig writes a kubeconfig with the contexts of TestFleetOverContexts, each in
// namespace ns.
func fleetKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cluster.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	nobody := cfg.AuthInfos[current.AuthInfo].DeepCopy()
	nobody.Impersonate = "fleet-nobody"
	cfg.AuthInfos["fleet-nobody"] = nobody
	cfg.Clusters["down"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	for name, c := range map[string]struct{ cluster, user string }{
		"east": {current.Cluster, current.AuthInfo}, "west": {current.Cluster, current.AuthInfo},
		"nobody": {current.Cluster, "fleet-nobody"}, "down": {"down", current.AuthInfo},
	} {
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: c.cluster, AuthInfo: c.user, Namespace: ns}
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// runFleet runs `daemonguard rollout args...` with kubeconfig as main does, and returns stdout.
func runFleet(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	cmd := cli.New()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(new(bytes.Buffer))
	cmd.SetArgs(append(append([]string{"rollout"}, args...), "--kubeconfig", kubeconfig))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
