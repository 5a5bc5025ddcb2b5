package gitops

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	// Pods take a moment to become ready, like real containers, so that a rollout lasts long
	// enough for Argo CD to report it in progress.
	os.Exit(localcluster.RunTests(m, localcluster.Config{PodReadyDelay: 2 * time.Second}, &cluster))
}

const (
	// agentsNS is the namespace of the DaemonSets in testdata/argocd/repo/node-agents.
	agentsNS = "node-agents"
	// policyFile and agentFile are the files the tests commit changes to.
	policyFile = "daemonguard/policies/team-policies.yaml"
	agentFile  = "node-agents/node-agent.yaml"
	// controlPlaneToleration is what daemonguard's webhook injects into every DaemonSet template.
	controlPlaneToleration = "node-role.kubernetes.io/control-plane"
	priorityClass          = "system-node-critical"
)

// gitops is the running setup the subtests share: Argo CD, the config repository, the Application
// and daemonguard's components on the host.
type gitops struct {
	argo      *localcluster.ArgoCD
	repo      *localcluster.GitRepo
	app       string // the Application's name
	releaseNS string // the Application's destination namespace: daemonguard's release namespace
	webhook   *localcluster.HostProcess
	view      []string // rows of the table of what Argo CD showed, for the README
}

// TestArgoCD syncs daemonguard, a policy ConfigMap and the seed DaemonSets with a real Argo CD,
// using testdata/argocd/application.yaml and testdata/argocd/argocd-cm-health.yaml as they are
// (only the repository URL, the destination server and the URL-mode values of the chart are set
// for the local cluster), then commits changes and checks what Argo CD reports.
func TestArgoCD(t *testing.T) {
	localcluster.NeedCluster(t)
	g := setUp(t)
	defer func() {
		t.Logf("What Argo CD showed (Application %s; DaemonSet %s/node-agent):\n"+
			"| step | sync | app health | node-agent health: message |\n| --- | --- | --- | --- |\n%s",
			g.app, agentsNS, strings.Join(g.view, "\n"))
	}()
	t.Run("synced and healthy, stays synced across hard refreshes while the webhook injects", g.testNoDrift)
	t.Run("a new image is Progressing during the rollout, Healthy after; nginx:1.91 is Degraded", g.testRolloutHealth)
	t.Run("a Rego commit is enforced without restart; broken Rego keeps the last good set and marks the ConfigMap", g.testPolicyCommits)
}

func setUp(t *testing.T) *gitops {
	t.Helper()
	ctx := context.Background()
	cm := readYAML(t, "testdata/argocd/argocd-cm-health.yaml")
	data, _, err := unstructured.NestedStringMap(cm.Object, "data")
	if err != nil || len(data) == 0 {
		t.Fatalf("testdata/argocd/argocd-cm-health.yaml has no data: %v", err)
	}
	argo, err := cluster.StartArgoCD(ctx, localcluster.ArgoCDOptions{ConfigData: data})
	if errors.Is(err, localcluster.ErrRedisMissing) {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(argo.Stop)
	// application.yaml installs the chart with certManager.enabled: true.
	if _, err := cluster.StartCertManager(ctx); err != nil {
		t.Fatal(err)
	}

	repo, first := newGitRepo(t)
	g := &gitops{argo: argo, repo: repo}
	webhookPort := harness.FreePort(t)
	app := applicationFor(t, repo.URL(), argo.Server, webhookPort)
	g.app = app.GetName()
	g.releaseNS, _, _ = unstructured.NestedString(app.Object, "spec", "destination", "namespace")
	dyn, err := dynamic.NewForConfig(cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	apps := dyn.Resource(localcluster.ApplicationResource).Namespace(argo.Namespace)
	if _, err := apps.Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// daemonguard's pods exist only as kwok's fakes; the real binaries run on the host with what
	// Argo CD applied: the Deployments' arguments, their ServiceAccounts' RBAC, the Secret
	// cert-manager issued for the Certificate in the chart.
	certDir := t.TempDir()
	harness.MountSecret(t, cluster, g.releaseNS, "daemonguard-webhook-tls", certDir)
	g.webhook = runComponent(t, g.releaseNS, "webhook", "--host=127.0.0.1", "--port="+strconv.Itoa(webhookPort), "--cert-dir="+certDir)
	runComponent(t, g.releaseNS, "controller")
	// Registered after the components' cleanups, so it runs before them: Argo CD deletes what it
	// synced (the Application's resources finalizer) while the webhook still answers. Deleting
	// a DaemonSet in the foreground ends with an update (the garbage collector removes the
	// finalizer) that the webhook admits; Argo CD deletes wave 1 before the webhook
	// configurations of wave 0.
	t.Cleanup(func() { g.deleteApplication(t, apps) })

	start := time.Now()
	a := waitApp(t, argo, g.app, 4*time.Minute, "the Application syncs and is Healthy", func(a *application) (bool, string) {
		return a.syncedAt(first) && a.Status.Health.Status == "Healthy", "not yet Synced and Healthy at " + first
	})
	t.Logf("Synced and Healthy %s after the Application was created", time.Since(start).Round(time.Second))
	g.record("initial sync", a)
	return g
}

// applicationFor returns testdata/argocd/application.yaml for the local cluster: every source
// from the local repository, the destination the local API server, and the chart's URL mode (the
// webhook configurations call the webhook on the host, whose serving certificate names
// 127.0.0.1). Nothing else differs from the file.
func applicationFor(t *testing.T, repoURL, server string, webhookPort int) *unstructured.Unstructured {
	t.Helper()
	app := readYAML(t, "testdata/argocd/application.yaml")
	sources, _, err := unstructured.NestedSlice(app.Object, "spec", "sources")
	if err != nil || len(sources) == 0 {
		t.Fatalf("application.yaml has no spec.sources: %v", err)
	}
	charts := 0
	for _, s := range sources {
		src := s.(map[string]any)
		src["repoURL"] = repoURL
		if helm, ok := src["helm"].(map[string]any); ok {
			charts++
			values, _ := helm["valuesObject"].(map[string]any)
			if values == nil {
				t.Fatal("application.yaml's chart source has no helm.valuesObject")
			}
			webhook, _ := values["webhook"].(map[string]any)
			if webhook == nil {
				webhook = map[string]any{}
			}
			webhook["url"] = "https://127.0.0.1:" + strconv.Itoa(webhookPort)
			values["webhook"] = webhook
			values["tls"] = map[string]any{"ipAddresses": []any{"127.0.0.1"}}
		}
	}
	if charts != 1 {
		t.Fatalf("application.yaml has %d Helm sources, want 1 (the chart)", charts)
	}
	if err := unstructured.SetNestedSlice(app.Object, sources, "spec", "sources"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(app.Object, server, "spec", "destination", "server"); err != nil {
		t.Fatal(err)
	}
	return app
}

// deleteApplication deletes the Application and waits until Argo CD has deleted its resources.
func (g *gitops) deleteApplication(t *testing.T, apps dynamic.ResourceInterface) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := apps.Delete(ctx, g.app, metav1.DeleteOptions{}); err != nil {
		t.Logf("delete Application %s: %v", g.app, err)
		return
	}
	for ctx.Err() == nil {
		if _, err := apps.Get(ctx, g.app, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	t.Logf("Argo CD did not finish deleting Application %s within 2 minutes", g.app)
}

// record adds a row to the table of what Argo CD showed.
func (g *gitops) record(step string, a *application) {
	_, h := a.resource("DaemonSet", agentsNS, "node-agent")
	msg := h.Message
	if msg == "" {
		msg = "-"
	}
	sync := a.Status.Sync.Status
	var drifted []string
	for _, r := range a.Status.Resources {
		if r.Status == "OutOfSync" {
			drifted = append(drifted, r.Kind+" "+r.Name)
		}
	}
	if len(drifted) > 0 {
		sync += " (" + strings.Join(drifted, ", ") + ")"
	}
	g.view = append(g.view, fmt.Sprintf("| %s | %s | %s | %s: %s |", step, sync, a.Status.Health.Status, h.Status, msg))
}

// recordConfigMap adds a line under the last row with what Argo CD showed for the policy
// ConfigMap.
func (g *gitops) recordConfigMap(a *application) {
	_, h := a.resource("ConfigMap", g.releaseNS, "team-policies")
	msg := h.Message
	if msg == "" {
		msg = "-"
	}
	g.view = append(g.view, fmt.Sprintf("| &nbsp; | | | ConfigMap `team-policies` %s: %s |", h.Status, msg))
}

// commit commits the repository's changes and hard-refreshes the Application, so Argo CD reads
// the new revision now instead of when the repo server's cache expires.
func (g *gitops) commit(t *testing.T, msg string) string {
	t.Helper()
	sha := g.repo.Commit(msg)
	if err := g.argo.HardRefresh(context.Background(), g.app); err != nil {
		t.Fatal(err)
	}
	return sha
}

func (g *gitops) daemonSet(t *testing.T, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := cluster.Client.AppsV1().DaemonSets(agentsNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// revisions lists the ControllerRevisions of the namespace: a changed template makes a new one.
func revisions(t *testing.T) []string {
	t.Helper()
	list, err := cluster.Client.AppsV1().ControllerRevisions(agentsNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range list.Items {
		names = append(names, fmt.Sprintf("%s@%d", r.Name, r.Revision))
	}
	slices.Sort(names)
	return names
}

func (g *gitops) testNoDrift(t *testing.T) {
	ctx := context.Background()
	generations := map[string]int64{}
	for _, name := range []string{"nginx-ds", "node-agent"} {
		ds := g.daemonSet(t, name)
		generations[name] = ds.Generation
		spec := ds.Spec.Template.Spec
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool { return tol.Key == controlPlaneToleration }) {
			t.Errorf("%s: Argo CD's sync was not mutated by the webhook: tolerations %+v", name, spec.Tolerations)
		}
		if spec.PriorityClassName != priorityClass {
			t.Errorf("%s: priorityClassName %q, want %q injected", name, spec.PriorityClassName, priorityClass)
		}
	}
	before := revisions(t)
	a, err := getApp(ctx, g.argo, g.app)
	if err != nil {
		t.Fatal(err)
	}
	lastSync := a.Status.OperationState.StartedAt

	const refreshes = 5
	for i := 1; i <= refreshes; i++ {
		if err := g.argo.HardRefresh(ctx, g.app); err != nil {
			t.Fatal(err)
		}
		// The controller drops the annotation in the same write as the refreshed status.
		a = waitApp(t, g.argo, g.app, time.Minute, fmt.Sprintf("hard refresh %d is done", i), func(a *application) (bool, string) {
			_, pending := a.Metadata.Annotations["argocd.argoproj.io/refresh"]
			return !pending, "refresh annotation still present"
		})
		if a.Status.Sync.Status != "Synced" || a.Status.Health.Status != "Healthy" {
			t.Errorf("after hard refresh %d: %s", i, a.summary())
		}
		for _, name := range []string{"nginx-ds", "node-agent"} {
			if sync, _ := a.resource("DaemonSet", agentsNS, name); sync != "Synced" {
				t.Errorf("after hard refresh %d: DaemonSet %s is %q", i, name, sync)
			}
		}
	}
	g.record(fmt.Sprintf("%d hard refreshes", refreshes), a)
	if a.Status.OperationState.StartedAt != lastSync {
		t.Errorf("Argo CD synced again during the refreshes (operation started %s, was %s): an OutOfSync loop", a.Status.OperationState.StartedAt, lastSync)
	}
	for name, gen := range generations {
		if got := g.daemonSet(t, name).Generation; got != gen {
			t.Errorf("%s: generation %d -> %d during the refreshes", name, gen, got)
		}
	}
	if after := revisions(t); !slices.Equal(before, after) {
		t.Errorf("ControllerRevisions changed during the refreshes: %v -> %v", before, after)
	}
}

// observeRollout polls the Application until done holds, recording every distinct health Argo CD
// reported for node-agent on the way (the first row named step); generation is node-agent's
// before the commit of sha.
func (g *gitops) observeRollout(t *testing.T, step, sha string, generation int64, timeout time.Duration, what string,
	done func(a *application, h healthStatus) bool) []healthStatus {
	t.Helper()
	var seen []healthStatus
	syncs := map[string]bool{} // operations by start time
	synced, drifted := false, 0
	waitApp(t, g.argo, g.app, timeout, what, func(a *application) (bool, string) {
		if !slices.Contains(a.Status.Sync.Revisions, sha) {
			return false, "not yet at " + sha
		}
		if op := a.Status.OperationState; op != nil {
			syncs[op.StartedAt] = true
		}
		if a.syncedAt(sha) {
			synced = true
		} else if synced && a.Status.Sync.Status == "OutOfSync" {
			drifted++
		}
		_, h := a.resource("DaemonSet", agentsNS, "node-agent")
		if len(seen) == 0 || seen[len(seen)-1] != h {
			seen = append(seen, h)
			t.Logf("Argo CD: DaemonSet node-agent %s: %s", h.Status, h.Message)
			g.record(step, a)
			step = "&nbsp;"
		}
		return done(a, h), fmt.Sprintf("node-agent %s: %s", h.Status, h.Message)
	})
	// Mid-rollout Argo CD 3.3's Server-Side Diff can report the DaemonSet OutOfSync for a moment:
	// it compares a dry run on the current object with its cached copy, and while the object
	// changes they differ in metadata.resourceVersion alone (measured: that is the whole diff).
	// Self-heal then re-applies git, which must change nothing: exactly one new generation, the
	// commit's.
	t.Logf("%s: Argo CD ran %d sync operation(s); OutOfSync in %d polls after the commit's sync", what, len(syncs), drifted)
	if got := g.daemonSet(t, "node-agent").Generation; got != generation+1 {
		t.Errorf("node-agent went from generation %d to %d for one commit: a sync changed the template", generation, got)
	}
	return seen
}

func (g *gitops) testRolloutHealth(t *testing.T) {
	rolledOut := func(image string) func(*application, healthStatus) bool {
		return func(a *application, h healthStatus) bool {
			if h.Status != "Healthy" {
				return false
			}
			ds := g.daemonSet(t, "node-agent")
			st := ds.Status
			return ds.Spec.Template.Spec.Containers[0].Image == image && st.ObservedGeneration == ds.Generation &&
				st.DesiredNumberScheduled > 0 && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
				st.NumberAvailable == st.DesiredNumberScheduled
		}
	}

	gen := g.daemonSet(t, "node-agent").Generation
	g.repo.Edit(agentFile, "image: nginx:1.25.5", "image: nginx:1.27.0")
	sha := g.commit(t, "node-agent: nginx 1.27.0")
	seen := g.observeRollout(t, "commit image nginx:1.27.0", sha, gen, 3*time.Minute, "node-agent rolls out nginx:1.27.0 and is Healthy", rolledOut("nginx:1.27.0"))
	if !slices.ContainsFunc(seen, func(h healthStatus) bool { return h.Status == "Progressing" }) {
		t.Errorf("Argo CD never reported node-agent Progressing during daemonguard's rollout; it reported %v", seen)
	}
	if last := seen[len(seen)-1]; last.Status != "Healthy" {
		t.Errorf("node-agent ends %v, want Healthy", last)
	}

	gen = g.daemonSet(t, "node-agent").Generation
	g.repo.Edit(agentFile, "image: nginx:1.27.0", "image: nginx:1.91")
	sha = g.commit(t, "node-agent: nginx 1.91, an image no node can pull")
	seen = g.observeRollout(t, "commit image nginx:1.91", sha, gen, 3*time.Minute, "node-agent is Degraded with daemonguard's message", func(a *application, h healthStatus) bool {
		return h.Status == "Degraded"
	})
	last := seen[len(seen)-1]
	if !strings.HasPrefix(last.Message, "PodFailure: step ") || !strings.Contains(last.Message, ": new pods fail; ") || !strings.Contains(last.Message, ": ImagePullBackOff since ") ||
		!strings.Contains(last.Message, "daemonguard rollout undo ds/node-agent") {
		t.Errorf("Degraded message %q, want daemonguard's PodFailure naming ImagePullBackOff, since when, and the undo command", last.Message)
	}
	a, err := getApp(context.Background(), g.argo, g.app)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status.Health.Status != "Degraded" {
		t.Errorf("the Application is %s with a Degraded DaemonSet, want Degraded", a.Status.Health.Status)
	}

	// daemonguard halts a failed rollout until the template changes: roll forward in git.
	gen = g.daemonSet(t, "node-agent").Generation
	g.repo.Edit(agentFile, "image: nginx:1.91", "image: nginx:1.27.1")
	sha = g.commit(t, "node-agent: roll forward to nginx 1.27.1")
	seen = g.observeRollout(t, "commit image nginx:1.27.1", sha, gen, 3*time.Minute, "node-agent rolls forward to nginx:1.27.1 and is Healthy", rolledOut("nginx:1.27.1"))
	if last := seen[len(seen)-1]; last.Status != "Healthy" {
		t.Errorf("node-agent ends %v after the roll forward, want Healthy", last)
	}
}

func (g *gitops) testPolicyCommits(t *testing.T) {
	ctx := context.Background()
	out, err := dryRunCreate(ctx, agentsNS, "no-team")
	if err != nil || !strings.Contains(out, "require_team_label") {
		t.Fatalf("with the policy at warn, a DaemonSet without a team label is admitted with a warning; got err %v:\n%s", err, out)
	}

	g.repo.Edit(policyFile, `enforcement := "warn"`, `enforcement := "deny"`)
	sha := g.commit(t, "require_team_label: deny")
	committed := time.Now()
	a := waitApp(t, g.argo, g.app, 2*time.Minute, "Argo CD syncs the policy commit", func(a *application) (bool, string) {
		return a.syncedAt(sha), "not synced at " + sha
	})
	g.record("commit Rego: warn to deny", a)
	cluster.WaitFor(t, time.Minute, "the next admission enforces the committed Rego", func(ctx context.Context) (bool, string) {
		out, err := dryRunCreate(ctx, agentsNS, "no-team")
		return err != nil && strings.Contains(out, "denied") && strings.Contains(out, "require_team_label"), out
	})
	t.Logf("the committed Rego was enforced %s after the commit", time.Since(committed).Round(100*time.Millisecond))
	if err := g.webhook.Exited(); err != nil {
		t.Fatalf("the webhook exited: %v", err)
	}

	// A parse error: the webhook must keep the last good set (deny) and say why on the ConfigMap.
	// Argo CD applies the broken ConfigMap (it is valid YAML); whether that sync operation then
	// succeeds depends on who is first: the webhook marking the ConfigMap Degraded, or Argo CD
	// checking the health of wave -1 before the next wave (a Degraded resource fails the sync,
	// and the Application's retry repeats it). Either way the live ConfigMap is git's.
	g.repo.Edit(policyFile, "    \tnot lib.labels.team\n    }\n", "    \tnot lib.labels.team\n    }\n\n    violation contains {\n")
	sha = g.commit(t, "require_team_label: broken Rego")
	a = waitApp(t, g.argo, g.app, 2*time.Minute, "Argo CD applies the broken Rego", func(a *application) (bool, string) {
		return a.Status.Sync.Status == "Synced" && slices.Contains(a.Status.Sync.Revisions, sha), "not synced at " + sha
	})
	g.record("commit broken Rego", a)
	var event string
	cluster.WaitFor(t, time.Minute, "a PolicyRejected Event on the ConfigMap", func(ctx context.Context) (bool, string) {
		list, err := cluster.Client.EventsV1().Events(g.releaseNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Reason == "PolicyRejected" && e.Regarding.Kind == "ConfigMap" && e.Regarding.Name == "team-policies" &&
				strings.Contains(e.Note, "require_team_label.rego") {
				event = e.Note
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d Events, none PolicyRejected on ConfigMap team-policies", len(list.Items))
	})
	t.Logf("Event on ConfigMap %s/team-policies: PolicyRejected: %s", g.releaseNS, event)
	out, err = dryRunCreate(ctx, agentsNS, "no-team")
	if err == nil || !strings.Contains(out, "require_team_label") {
		t.Errorf("after the broken commit the last good set (deny) must keep enforcing; got err %v:\n%s", err, out)
	}
	if err := g.webhook.Exited(); err != nil {
		t.Fatalf("the webhook exited on broken Rego: %v", err)
	}

	// The ConfigMap carries the error (written by the webhook under the chart's RBAC), and Argo
	// CD shows it Degraded with that message without calling the annotation drift.
	var rejected string
	cluster.WaitFor(t, time.Minute, "the ConfigMap carries the policy error with file and line", func(ctx context.Context) (bool, string) {
		cm, err := cluster.Client.CoreV1().ConfigMaps(g.releaseNS).Get(ctx, "team-policies", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		rejected = cm.Annotations[admission.PolicyErrorAnnotation]
		return rejectedRego.MatchString(rejected), fmt.Sprintf("annotation %q", rejected)
	})
	t.Logf("ConfigMap %s/team-policies: %s: %s", g.releaseNS, admission.PolicyErrorAnnotation, rejected)
	drifted := 0 // polls in which Argo CD called anything OutOfSync
	noDrift := func(a *application) {
		if sync, _ := a.resource("ConfigMap", g.releaseNS, "team-policies"); a.Status.Sync.Status != "Synced" || sync != "Synced" {
			drifted++
			t.Logf("OutOfSync with the policy error annotation: %s", a.summary())
		}
	}
	a = waitApp(t, g.argo, g.app, 2*time.Minute, "Argo CD shows the ConfigMap and the Application Degraded with the webhook's error", func(a *application) (bool, string) {
		noDrift(a)
		_, h := a.resource("ConfigMap", g.releaseNS, "team-policies")
		return h.Status == "Degraded" && h.Message == rejected && a.Status.Health.Status == "Degraded",
			fmt.Sprintf("ConfigMap team-policies %s: %s", h.Status, h.Message)
	})
	// A hard refresh diffs git against the annotated ConfigMap afresh.
	if err := g.argo.HardRefresh(ctx, g.app); err != nil {
		t.Fatal(err)
	}
	a = waitApp(t, g.argo, g.app, time.Minute, "the hard refresh is done", func(a *application) (bool, string) {
		noDrift(a)
		_, pending := a.Metadata.Annotations["argocd.argoproj.io/refresh"]
		return !pending, "refresh annotation still present"
	})
	g.record("webhook rejects the Rego", a)
	g.recordConfigMap(a)
	if _, h := a.resource("ConfigMap", g.releaseNS, "team-policies"); h.Status != "Degraded" || h.Message != rejected {
		t.Errorf("after the hard refresh Argo CD shows ConfigMap team-policies %s: %s, want Degraded: %s", h.Status, h.Message, rejected)
	}
	if drifted > 0 {
		t.Errorf("Argo CD reported the annotated ConfigMap or the Application OutOfSync in %d polls", drifted)
	}
	// How the broken commit's sync ended its first attempt, for the README: not asserted, it
	// depends on whether the webhook marked the ConfigMap before Argo CD checked wave -1.
	a = waitApp(t, g.argo, g.app, 2*time.Minute, "the broken commit's sync ends an attempt", func(a *application) (bool, string) {
		op := a.Status.OperationState
		return op != nil && (op.Phase != "Running" || op.RetryCount > 0), "sync still in its first attempt"
	})
	op := a.Status.OperationState
	t.Logf("Argo CD's sync of the broken commit: %s after %d retries: %s", op.Phase, op.RetryCount, op.Message)
	for _, r := range op.SyncResult.Resources {
		if r.Kind == "ConfigMap" && r.Name == "team-policies" {
			t.Logf("  sync result of ConfigMap team-policies: %s, phase %s: %s", r.Status, r.HookPhase, r.Message)
		}
	}

	// Fixing the Rego in git loads the set again: the annotation goes, the ConfigMap is Healthy.
	// The sync of the broken commit may still be retrying; the Application's retry.refresh makes
	// the next attempt use the fix.
	g.repo.Edit(policyFile, "    }\n\n    violation contains {\n", "    }\n")
	sha = g.commit(t, "require_team_label: fix the Rego")
	a = waitApp(t, g.argo, g.app, 4*time.Minute, "Argo CD syncs the fix and shows the ConfigMap and the Application Healthy", func(a *application) (bool, string) {
		_, h := a.resource("ConfigMap", g.releaseNS, "team-policies")
		return a.syncedAt(sha) && h.Status == "Healthy" && a.Status.Health.Status == "Healthy",
			fmt.Sprintf("ConfigMap team-policies %s: %s", h.Status, h.Message)
	})
	g.record("commit fixed Rego", a)
	g.recordConfigMap(a)
	cm, err := cluster.Client.CoreV1().ConfigMaps(g.releaseNS).Get(ctx, "team-policies", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := cm.Annotations[admission.PolicyErrorAnnotation]; ok {
		t.Errorf("the fixed ConfigMap still carries %s: %q", admission.PolicyErrorAnnotation, v)
	}
	out, err = dryRunCreate(ctx, agentsNS, "no-team")
	if err == nil || !strings.Contains(out, "require_team_label") {
		t.Errorf("after the fix the deny must enforce; got err %v:\n%s", err, out)
	}
}

// rejectedRego is the policy error the webhook writes for the broken commit: file, line, error
// and that the last good set serves.
var rejectedRego = regexp.MustCompile(`^configmap/team-policies/require_team_label\.rego:\d+: rego_parse_error: .+; data sha256:[0-9a-f]{12} rejected, the last good policy set keeps serving$`)
