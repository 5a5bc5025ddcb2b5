package gitops

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// newGitRepo creates a repository on branch main holding testdata/argocd/repo with the chart
// copied to daemonguard/chart, and commits it.
func newGitRepo(t *testing.T) (*localcluster.GitRepo, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cluster-config")
	if err := os.CopyFS(dir, os.DirFS(repoPath(t, "testdata/argocd/repo"))); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "daemonguard", "chart"), os.DirFS(repoPath(t, "charts/daemonguard"))); err != nil {
		t.Fatal(err)
	}
	return localcluster.NewGitRepo(t, dir, "daemonguard, its policies and the node agents")
}

func repoPath(t *testing.T, rel string) string {
	t.Helper()
	return toolbin.RepoPath(t, filepath.FromSlash(rel))
}

// readYAML decodes one YAML document of the repository.
func readYAML(t *testing.T, rel string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(repoPath(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatalf("decode %s: %v", rel, err)
	}
	return u
}

// application is the part of an Argo CD Application's status the tests read.
type application struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Status struct {
		Sync struct {
			Status    string   `json:"status"`
			Revisions []string `json:"revisions"`
		} `json:"sync"`
		Health         healthStatus `json:"health"`
		ReconciledAt   string       `json:"reconciledAt"`
		OperationState *struct {
			Phase      string `json:"phase"`
			Message    string `json:"message"`
			StartedAt  string `json:"startedAt"`
			RetryCount int64  `json:"retryCount"`
			SyncResult struct {
				Revisions []string `json:"revisions"`
				Resources []struct {
					Kind      string `json:"kind"`
					Name      string `json:"name"`
					Status    string `json:"status"`
					HookPhase string `json:"hookPhase"`
					Message   string `json:"message"`
				} `json:"resources"`
			} `json:"syncResult"`
		} `json:"operationState"`
		Resources []struct {
			Kind      string        `json:"kind"`
			Namespace string        `json:"namespace"`
			Name      string        `json:"name"`
			Status    string        `json:"status"`
			Health    *healthStatus `json:"health"`
		} `json:"resources"`
		Conditions []struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

type healthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

// resource returns the sync status and health Argo CD reports for one managed resource.
func (a *application) resource(kind, ns, name string) (sync string, health healthStatus) {
	for _, r := range a.Status.Resources {
		if r.Kind == kind && r.Namespace == ns && r.Name == name {
			if r.Health != nil {
				health = *r.Health
			}
			return r.Status, health
		}
	}
	return "", health
}

// syncedAt tells whether every source is compared at revision and the last sync applied it.
func (a *application) syncedAt(revision string) bool {
	if a.Status.Sync.Status != "Synced" || len(a.Status.Sync.Revisions) == 0 || a.Status.OperationState == nil ||
		a.Status.OperationState.Phase != "Succeeded" {
		return false
	}
	for _, r := range append(append([]string{}, a.Status.Sync.Revisions...), a.Status.OperationState.SyncResult.Revisions...) {
		if r != revision {
			return false
		}
	}
	return true
}

func (a *application) summary() string {
	s := fmt.Sprintf("sync %s at %v, health %s", a.Status.Sync.Status, a.Status.Sync.Revisions, a.Status.Health.Status)
	if op := a.Status.OperationState; op != nil {
		s += fmt.Sprintf(", operation %s: %s", op.Phase, op.Message)
	}
	for _, c := range a.Status.Conditions {
		s += fmt.Sprintf(", condition %s: %s", c.Type, c.Message)
	}
	for _, r := range a.Status.Resources {
		if r.Status != "Synced" || (r.Health != nil && r.Health.Status != "Healthy") {
			h := healthStatus{}
			if r.Health != nil {
				h = *r.Health
			}
			s += fmt.Sprintf("; %s %s/%s %s %s %s", r.Kind, r.Namespace, r.Name, r.Status, h.Status, h.Message)
		}
	}
	return s
}

// getApp reads an Application.
func getApp(ctx context.Context, argo *localcluster.ArgoCD, name string) (*application, error) {
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig)
	if err != nil {
		return nil, err
	}
	u, err := dyn.Resource(localcluster.ApplicationResource).Namespace(argo.Namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	a := &application{}
	return a, json.Unmarshal(data, a)
}

// waitApp polls the Application until cond holds, failing at once when an Argo CD component died.
func waitApp(t *testing.T, argo *localcluster.ArgoCD, name string, timeout time.Duration, what string,
	cond func(a *application) (bool, string)) *application {
	t.Helper()
	var last *application
	cluster.WaitFor(t, timeout, what, func(ctx context.Context) (bool, string) {
		if err := argo.Exited(); err != nil {
			t.Fatalf("Argo CD: %v", err)
		}
		a, err := getApp(ctx, argo, name)
		if err != nil {
			return false, err.Error()
		}
		last = a
		ok, why := cond(a)
		return ok, why + " (" + a.summary() + ")"
	})
	return last
}

// runComponent runs daemonguard on the host as the Deployment named *-<suffix> in ns, as Argo CD
// synced it from the chart (see harness.RunComponent), once Argo CD has created it.
func runComponent(t *testing.T, ns, suffix string, overrides ...string) *localcluster.HostProcess {
	t.Helper()
	var dep *appsv1.Deployment
	cluster.WaitFor(t, 2*time.Minute, "Argo CD creates the "+suffix+" Deployment", func(ctx context.Context) (bool, string) {
		list, err := cluster.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for i := range list.Items {
			if strings.HasSuffix(list.Items[i].Name, "-"+suffix) {
				dep = &list.Items[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Deployments, none named *-%s", len(list.Items), suffix)
	})
	return harness.RunComponent(t, cluster, dep, overrides...).Proc
}

// dryRunCreate sends a DaemonSet create through the API server (and so through the webhooks)
// without storing it, as kubectl does, and returns kubectl's output and error.
func dryRunCreate(ctx context.Context, ns, name string) (string, error) {
	manifest := fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %s
  namespace: %s
spec:
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers: [{name: agent, image: "registry.example/agent:1"}]
`, name, ns, name, name)
	out, stderr, err := cluster.Kubectl(ctx, manifest, "create", "--dry-run=server", "-f", "-")
	return out + stderr, err
}
