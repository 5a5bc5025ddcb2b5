package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/agentmetrics"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/promtest"
)

const (
	// agentsNS and agent are the DaemonSet of testdata/fleet/repo/node-agents.
	agentsNS = "node-agents"
	agent    = "log-shipper"
	// agentFile is the file a release commits to.
	agentFile = "node-agents/log-shipper.yaml"
	// envLabel is the cluster label the ApplicationSet's steps select on.
	envLabel = "env"
)

// member is one cluster of the fleet: its control plane, daemonguard's rollout controller, the
// stand-in for its node agents' metrics and the Prometheus that scrapes them, which the controller
// measures the analysis gate in.
type member struct {
	name, env string // in Argo CD
	c         *localcluster.Cluster
	agents    *agentmetrics.Exporter
}

// app is the member's Application, as the ApplicationSet's template names it.
func (m *member) app() string { return "node-agents-" + m.name }

// startMembers starts the clusters of the rest, on top of the hub, all at once; each stops when
// the test ends, keeping its logs when the test failed.
func startMembers(t *testing.T, names ...string) []*localcluster.Cluster {
	t.Helper()
	clusters := make([]*localcluster.Cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i := range names {
		wg.Go(func() {
			clusters[i], errs[i] = localcluster.Start(context.Background(), memberConfig())
		})
	}
	wg.Wait()
	for i, c := range clusters {
		if c == nil {
			continue
		}
		t.Cleanup(func() {
			if t.Failed() {
				c.StopKeepLogs()
				t.Logf("cluster %s: component logs kept in %s/logs", names[i], c.Dir)
				return
			}
			c.Stop()
		})
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start cluster %s: %v", names[i], err)
		}
	}
	return clusters
}

// runDaemonguard starts the member's Prometheus, scraping the member's node agents, and
// daemonguard's rollout controller measuring gates there; both stop when the test ends.
func (m *member) runDaemonguard(t *testing.T) {
	t.Helper()
	m.agents = agentmetrics.New(m.c.Client, agentsNS, agent)
	prom := promtest.Start(t, promtest.Options{Targets: []promtest.Target{{Job: "agents", URL: m.agents.Serve(t)}}})
	ctl, err := harness.StartControllerWith(context.Background(), m.c, harness.ControllerOptions{
		Namespaces: []string{agentsNS}, Prometheus: promquery.Options{Address: prom.Address(), Timeout: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctl.Stop(); err != nil {
			t.Errorf("stop the rollout controller of %s: %v", m.name, err)
		}
	})
}

// daemonSet reads the member's DaemonSet.
func (m *member) daemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ds, err := m.c.Client.AppsV1().DaemonSets(agentsNS).Get(context.Background(), agent, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: %v", m.name, err)
	}
	return ds
}

// templateAt is when the member's DaemonSet got the template that runs image: the creation of
// the ControllerRevision the DaemonSet controller made for it.
func (m *member) templateAt(t *testing.T, image string) time.Time {
	t.Helper()
	list, err := m.c.Client.AppsV1().ControllerRevisions(agentsNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + agent})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Items {
		if strings.Contains(string(r.Data.Raw), `"image":"`+image+`"`) {
			return r.CreationTimestamp.Time
		}
	}
	t.Fatalf("%s: no ControllerRevision of %s runs %s", m.name, agent, image)
	return time.Time{}
}

// podRevision is the controller-revision-hash of the member's pods, which all run one revision.
func (m *member) podRevision(t *testing.T) string {
	t.Helper()
	pods, err := m.c.Client.CoreV1().Pods(agentsNS).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + agent})
	if err != nil {
		t.Fatal(err)
	}
	var revisions []string
	for _, p := range pods.Items {
		if r := p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]; !slices.Contains(revisions, r) {
			revisions = append(revisions, r)
		}
	}
	if len(revisions) != 1 {
		t.Fatalf("%s: the pods of %s run revisions %v, want one", m.name, agent, revisions)
	}
	return revisions[0]
}

// newGitRepo creates the repository Argo CD syncs from, holding testdata/fleet/repo, and
// commits it.
func newGitRepo(t *testing.T) (*localcluster.GitRepo, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "node-agents")
	if err := os.CopyFS(dir, os.DirFS(toolbin.RepoPath(t, filepath.FromSlash("testdata/fleet/repo")))); err != nil {
		t.Fatal(err)
	}
	return localcluster.NewGitRepo(t, dir, "log-shipper 1.0.0")
}

// applicationSetFor returns testdata/fleet/applicationset.yaml with its source in the local
// repository; nothing else differs from the file.
func applicationSetFor(t *testing.T, repoURL string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(toolbin.RepoPath(t, filepath.FromSlash("testdata/fleet/applicationset.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatalf("decode testdata/fleet/applicationset.yaml: %v", err)
	}
	if err := unstructured.SetNestedField(u.Object, repoURL, "spec", "template", "spec", "source", "repoURL"); err != nil {
		t.Fatal(err)
	}
	return u
}

// application is the part of an Argo CD Application the test reads.
type application struct {
	Status struct {
		Sync struct {
			Status   string `json:"status"`
			Revision string `json:"revision"`
		} `json:"sync"`
		Health struct {
			Status string `json:"status"`
		} `json:"health"`
		OperationState *struct {
			Phase      string      `json:"phase"`
			StartedAt  metav1.Time `json:"startedAt"`
			SyncResult struct {
				Revision string `json:"revision"`
			} `json:"syncResult"`
		} `json:"operationState"`
		Resources []struct {
			Kind   string `json:"kind"`
			Name   string `json:"name"`
			Health *struct {
				Status  string `json:"status"`
				Message string `json:"message"`
			} `json:"health"`
		} `json:"resources"`
	} `json:"status"`
}

// syncedAt tells whether the Application is Synced at revision by a sync of revision.
func (a *application) syncedAt(revision string) bool {
	op := a.Status.OperationState
	return a.Status.Sync.Status == "Synced" && a.Status.Sync.Revision == revision && op != nil &&
		op.Phase == "Succeeded" && op.SyncResult.Revision == revision
}

// agentHealth is the health and message Argo CD reports for the node agent's DaemonSet.
func (a *application) agentHealth() string {
	for _, r := range a.Status.Resources {
		if r.Kind == "DaemonSet" && r.Name == agent && r.Health != nil {
			return r.Health.Status + ": " + r.Health.Message
		}
	}
	return "no health"
}

func (a *application) String() string {
	s := fmt.Sprintf("%s at %.7s, %s", a.Status.Sync.Status, a.Status.Sync.Revision, a.Status.Health.Status)
	if op := a.Status.OperationState; op != nil {
		s += fmt.Sprintf(", last sync %s at %.7s started %s", op.Phase, op.SyncResult.Revision, op.StartedAt.UTC().Format(time.TimeOnly))
	}
	return s + " (" + agent + " " + a.agentHealth() + ")"
}

// applicationSet is the part of an ApplicationSet's status the test reads: where each
// Application is in the progressive sync.
type applicationSet struct {
	Status struct {
		ApplicationStatus []appSetAppStatus `json:"applicationStatus"`
		Conditions        []struct {
			Type    string `json:"type"`
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"conditions"`
	} `json:"status"`
}

type appSetAppStatus struct {
	Application     string   `json:"application"`
	Step            string   `json:"step"`
	Status          string   `json:"status"`
	Message         string   `json:"message"`
	TargetRevisions []string `json:"targetRevisions"`
}

// app returns the progressive-sync status of the named Application; zero when it has none.
func (s *applicationSet) app(name string) appSetAppStatus {
	for _, a := range s.Status.ApplicationStatus {
		if a.Application == name {
			return a
		}
	}
	return appSetAppStatus{}
}

// condition returns the status and message of the condition of type typ.
func (s *applicationSet) condition(typ string) (string, string) {
	for _, c := range s.Status.Conditions {
		if c.Type == typ {
			return c.Status, c.Message
		}
	}
	return "", ""
}

func (s *applicationSet) String() string {
	var parts []string
	for _, a := range s.Status.ApplicationStatus {
		parts = append(parts, fmt.Sprintf("%s step %s %s", a.Application, a.Step, a.Status))
	}
	status, msg := s.condition("RolloutProgressing")
	return strings.Join(parts, "; ") + fmt.Sprintf("; RolloutProgressing %s: %s", status, msg)
}

// fleetView is what Argo CD reports at one moment: the ApplicationSet and each member's
// Application.
type fleetView struct {
	set  *applicationSet
	apps map[string]*application // by member name
}

func (v *fleetView) String() string {
	names := make([]string, 0, len(v.apps))
	for name := range v.apps {
		names = append(names, name)
	}
	slices.Sort(names)
	s := "ApplicationSet: " + v.set.String()
	for _, name := range names {
		s += "\n  " + name + ": " + v.apps[name].String()
	}
	return s
}

// argoReader reads Argo CD's objects from the hub.
type argoReader struct {
	argo    *localcluster.ArgoCD
	dyn     dynamic.Interface
	set     string
	members []*member
}

func (r *argoReader) read(ctx context.Context) (*fleetView, error) {
	u, err := r.dyn.Resource(localcluster.ApplicationSetResource).Namespace(r.argo.Namespace).Get(ctx, r.set, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	v := &fleetView{set: &applicationSet{}, apps: map[string]*application{}}
	if err := fromUnstructured(u, v.set); err != nil {
		return nil, err
	}
	for _, m := range r.members {
		u, err := r.dyn.Resource(localcluster.ApplicationResource).Namespace(r.argo.Namespace).Get(ctx, m.app(), metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		a := &application{}
		if err := fromUnstructured(u, a); err != nil {
			return nil, err
		}
		v.apps[m.name] = a
	}
	return v, nil
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	data, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

// wait polls Argo CD until cond holds for what it reports, failing at once when an Argo CD
// component or a member's control plane died, and returns the view cond held for.
func (r *argoReader) wait(t *testing.T, timeout time.Duration, what string, cond func(v *fleetView) (bool, string)) *fleetView {
	t.Helper()
	var last *fleetView
	hub.WaitFor(t, timeout, what, func(ctx context.Context) (bool, string) {
		if err := r.argo.Exited(); err != nil {
			t.Fatalf("Argo CD: %v", err)
		}
		for _, m := range r.members {
			if err := m.c.Healthy(); err != nil {
				t.Fatalf("cluster %s: %v", m.name, err)
			}
		}
		v, err := r.read(ctx)
		if err != nil {
			return false, err.Error()
		}
		last = v
		ok, why := cond(v)
		return ok, why + "\n" + v.String()
	})
	return last
}

// release commits a new image of the node agent and makes Argo CD see it, canary first, as a
// fleet must: each Application is hard-refreshed (as a git webhook would; the repo server's
// revision cache would otherwise hide the commit for minutes), the canary's first, and the rest's
// only once the ApplicationSet has taken the canary off Healthy for the new revision.
//
// Why the order matters: Argo CD v3.3's RollingSync lets a step sync when every Application of the
// steps before it is Healthy in the ApplicationSet's status, and that entry is reset only when the
// Application itself shows the new revision. A rest Application that sees a commit before the
// canary does finds the canary still Healthy, for the previous revision, and is let through
// (measured: it went Pending at once; that its sync did not start was luck of timing).
func (r *argoReader) release(t *testing.T, repo *localcluster.GitRepo, from, to string) string {
	t.Helper()
	repo.Edit(agentFile, "image: "+from+"\n", "image: "+to+"\n")
	sha := repo.Commit("log-shipper " + to)
	canary, rest := r.members[0], r.members[1:]
	r.refresh(t, canary)
	r.wait(t, time.Minute, "the ApplicationSet takes the canary to the new revision", func(v *fleetView) (bool, string) {
		s := v.set.app(canary.app())
		return slices.Equal(s.TargetRevisions, []string{sha}) && s.Status != "Healthy", fmt.Sprintf("canary %s at %v", s.Status, s.TargetRevisions)
	})
	r.refresh(t, rest...)
	return sha
}

// refresh hard-refreshes the members' Applications.
func (r *argoReader) refresh(t *testing.T, members ...*member) {
	t.Helper()
	for _, m := range members {
		if err := r.argo.HardRefresh(context.Background(), m.app()); err != nil {
			t.Fatal(err)
		}
	}
}
