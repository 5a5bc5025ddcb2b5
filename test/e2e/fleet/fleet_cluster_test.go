package fleet

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/daemonguard/daemonguard/charts/argocd"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// The releases the test commits, in order.
const (
	firstImage = "registry.example/log-shipper:1.0.0"
	goodImage  = "registry.example/log-shipper:1.1.0"
	badImage   = "registry.example/log-shipper:1.2.0"
)

// bake is the daemonguard.io/bake of testdata/fleet/repo's DaemonSet.
const bake = 10 * time.Second

// TestFleetRollsOutCanaryFirstAndStopsOnAFailedGate releases the node agents of
// testdata/fleet/repo to three clusters with testdata/fleet/applicationset.yaml (RollingSync:
// env=canary, then env=rest) and daemonguard's Argo CD health check; each cluster has three kwok
// nodes, its own rollout controller and its own Prometheus:
//   - a good release reaches the rest only after the canary's rollout has completed, its gate
//     passed and its bake passed: the rest's DaemonSets get the new template no earlier than the
//     canary's Complete condition, which is no earlier than the canary's completion plus the bake;
//   - a release whose errors gate fails on the canary (its Prometheus reads an error ratio of 0.5
//     from the new pods) fails the canary's rollout, Argo CD calls the canary Degraded, and the
//     ApplicationSet holds at step 1: the rest keep the previous template, and are not synced.
func TestFleetRollsOutCanaryFirstAndStopsOnAFailedGate(t *testing.T) {
	localcluster.NeedCluster(t)
	for _, dep := range []string{"redis-server", "prometheus"} {
		if _, err := exec.LookPath(dep); err != nil {
			t.Skipf("%s is not on PATH: install Debian's %s package (`make testdeps` does as root)", dep, dep)
		}
	}
	begin := time.Now()
	ctx := context.Background()
	rest := startMembers(t, "rest-1", "rest-2")
	members := []*member{{name: "canary", env: "canary", c: hub}, {name: "rest-1", env: "rest", c: rest[0]}, {name: "rest-2", env: "rest", c: rest[1]}}
	canary, others := members[0], members[1:]
	var registered []localcluster.ArgoCDCluster
	for _, m := range members {
		m.runDaemonguard(t)
		registered = append(registered, localcluster.ArgoCDCluster{Name: m.name, Cluster: m.c, Labels: map[string]string{envLabel: m.env}})
	}
	argo, err := hub.StartArgoCD(ctx, localcluster.ArgoCDOptions{
		ConfigData: map[string]string{argocd.HealthKey: argocd.HealthLua}, Clusters: registered, ApplicationSets: true})
	if errors.Is(err, localcluster.ErrRedisMissing) {
		t.Skip(err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(argo.Stop)
	t.Logf("three clusters, daemonguard and Argo CD up after %s", time.Since(begin).Round(time.Second))

	repo, first := newGitRepo(t)
	set := applicationSetFor(t, repo.URL())
	dyn, err := dynamic.NewForConfig(hub.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(localcluster.ApplicationSetResource).Namespace(argo.Namespace).Create(ctx, set, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	argoCD := &argoReader{argo: argo, dyn: dyn, set: set.GetName(), members: members}

	start := time.Now()
	argoCD.wait(t, 3*time.Minute, "the first release is synced and Healthy on every cluster", allHealthyAt(first))
	t.Logf("first release on every cluster %s after the ApplicationSet was created", time.Since(start).Round(time.Second))

	// The good release.
	start = time.Now()
	good := argoCD.release(t, repo, firstImage, goodImage)
	v := argoCD.wait(t, 3*time.Minute, "the good release is synced and Healthy on every cluster", allHealthyAt(good))
	t.Logf("good release on every cluster %s after its commit", time.Since(start).Round(time.Second))
	for _, m := range members {
		clustertest.WaitDaemonSet(t, m.c, agentsNS, agent, time.Minute, m.name+" runs the good release", clustertest.RolledOut(goodImage, nodesPerCluster, true))
	}
	ds := canary.daemonSet(t)
	complete := clustertest.RolloutCondition(ds, rolloutapi.PhaseComplete)
	completedAt, err := time.Parse(time.RFC3339, ds.Annotations[rolloutapi.StatusCompletedAt])
	if err != nil {
		t.Fatalf("canary: %s %q: %v", rolloutapi.StatusCompletedAt, ds.Annotations[rolloutapi.StatusCompletedAt], err)
	}
	// Condition times are whole seconds: the Complete condition may read up to 1 s before the
	// bake's end.
	if baked := completedAt.Add(bake); complete.LastTransitionTime.Add(time.Second).Before(baked) {
		t.Errorf("canary: Complete at %s, before its completion %s plus the bake %s", stamp(complete.LastTransitionTime.Time), stamp(completedAt), bake)
	}
	t.Logf("canary: template %s, rollout completed %s, Complete (baked) %s", stamp(canary.templateAt(t, goodImage)), stamp(completedAt), stamp(complete.LastTransitionTime.Time))
	// ControllerRevisions and conditions carry whole seconds: a template in the second the canary
	// was Complete counts as after it.
	for _, m := range others {
		at := m.templateAt(t, goodImage)
		t.Logf("%s: template %s (last sync started %s)", m.name, stamp(at), stamp(v.apps[m.name].Status.OperationState.StartedAt.Time))
		if at.Before(complete.LastTransitionTime.Time) {
			t.Errorf("%s: template %s, before the canary was Complete (baked) at %s", m.name, stamp(at), stamp(complete.LastTransitionTime.Time))
		}
	}

	// The bad release: on the canary the new pods report an error ratio of 0.5, the good
	// release's 0. The rest would fail it too, should it ever reach them.
	for _, m := range members {
		m.agents.Set(m.podRevision(t), 0)
		m.agents.SetOthers(0.5)
	}
	before := map[string]*appsv1.DaemonSet{}
	lastSync := map[string]time.Time{} // when the rest's syncs of the good release started
	for _, m := range others {
		before[m.name] = m.daemonSet(t)
		lastSync[m.name] = v.apps[m.name].Status.OperationState.StartedAt.Time
	}
	start = time.Now()
	bad := argoCD.release(t, repo, goodImage, badImage)
	ds = clustertest.WaitDaemonSet(t, canary.c, agentsNS, agent, 2*time.Minute, "the canary's rollout fails its gate", func(ds *appsv1.DaemonSet) (bool, string) {
		return clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed) != nil, fmt.Sprintf("image %s, conditions %+v", ds.Spec.Template.Spec.Containers[0].Image, ds.Status.Conditions)
	})
	failed := clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed)
	if failed.Reason != rolloutapi.ReasonAnalysisFailed || !strings.Contains(failed.Message, "gate errors") {
		t.Errorf("canary: Failed with %s: %s; want %s naming the gate errors", failed.Reason, failed.Message, rolloutapi.ReasonAnalysisFailed)
	}
	t.Logf("canary: %s: %s", failed.Reason, failed.Message)
	stopped := func(v *fleetView) (bool, string) {
		c := v.apps[canary.name]
		if c.Status.Sync.Revision != bad || c.Status.Health.Status != "Degraded" {
			return false, "the canary is not yet Degraded at the bad release"
		}
		if s := v.set.app(canary.app()); s.Step != "1" || s.Status != "Progressing" {
			return false, fmt.Sprintf("the ApplicationSet has the canary at step %q %s, want step 1 Progressing", s.Step, s.Status)
		}
		for _, m := range others {
			a := v.apps[m.name]
			if s := v.set.app(m.app()); s.Step != "2" || s.Status != "Waiting" {
				return false, fmt.Sprintf("the ApplicationSet has %s at step %q %s, want step 2 Waiting", m.name, s.Step, s.Status)
			}
			if a.Status.Sync.Status != "OutOfSync" || a.Status.Sync.Revision != bad {
				return false, m.name + " is not yet compared with the bad release"
			}
			if op := a.Status.OperationState; op == nil || !op.StartedAt.Time.Equal(lastSync[m.name]) {
				t.Fatalf("%s was synced after the good release: %s", m.name, a)
			}
		}
		if status, msg := v.set.condition("RolloutProgressing"); status != "True" || !strings.Contains(msg, "step 1") {
			return false, "the ApplicationSet does not say it is rolling out step 1"
		}
		return true, ""
	}
	v = argoCD.wait(t, 2*time.Minute, "the ApplicationSet holds at the canary's step, the canary Degraded", stopped)
	t.Logf("stopped %s after the bad release's commit:\n%s", time.Since(start).Round(time.Second), v)

	// It stays so: were the canary Healthy, step 2 would sync within a reconcile. Held longer
	// than the bake, the rest's DaemonSets keep the good release's template and generation.
	const hold = bake + 5*time.Second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for deadline := time.Now().Add(hold); time.Now().Before(deadline); <-tick.C {
		v, err := argoCD.read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ok, why := stopped(v); !ok {
			t.Fatalf("the fleet moved on from a failed canary: %s\n%s", why, v)
		}
		for _, m := range others {
			ds := m.daemonSet(t)
			if ds.Generation != before[m.name].Generation || ds.Spec.Template.Spec.Containers[0].Image != goodImage {
				t.Fatalf("%s: generation %d -> %d, image %s: the bad release reached it", m.name, before[m.name].Generation, ds.Generation, ds.Spec.Template.Spec.Containers[0].Image)
			}
		}
	}
	for _, m := range others {
		clustertest.WaitDaemonSet(t, m.c, agentsNS, agent, 10*time.Second, m.name+" still runs the good release", clustertest.RolledOut(goodImage, nodesPerCluster, true))
	}
	t.Logf("the rest kept %s for %s while the canary was Degraded", goodImage, hold)
	t.Logf("runtime: %s for this test, %s with the hub cluster's start", time.Since(begin).Round(time.Second), time.Since(started).Round(time.Second))
}

// allHealthyAt holds when every member's Application is synced at revision and Healthy, and the
// ApplicationSet has each Healthy and its rollout complete.
func allHealthyAt(revision string) func(v *fleetView) (bool, string) {
	return func(v *fleetView) (bool, string) {
		for name, a := range v.apps {
			if !a.syncedAt(revision) || a.Status.Health.Status != "Healthy" {
				return false, name + " is not yet synced and Healthy at " + revision
			}
		}
		for _, s := range v.set.Status.ApplicationStatus {
			if s.Status != "Healthy" {
				return false, s.Application + " is not yet Healthy in the ApplicationSet"
			}
		}
		if status, _ := v.set.condition("RolloutProgressing"); status != "False" {
			return false, "the ApplicationSet's rollout is not complete"
		}
		return true, ""
	}
}

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }
