package rollout_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// TestRolloutSurvivesControlPlaneRestarts restarts the API server, and in a second rollout etcd,
// while a managed rollout replaces pods: the rollout completes within its budget at every watch
// event, and the rollout controller and the webhook, started once before, carry on without a
// restart of their own (their watches, caches and leader election reconnect).
func TestRolloutSurvivesControlPlaneRestarts(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	wh, err := harness.StartWebhook(ctx, cluster, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Stop()
	ctl := startController(t)
	defer ctl.Stop()

	const budget = 1
	for _, component := range []string{"kube-apiserver", "etcd"} {
		t.Run(component, func(t *testing.T) {
			ns := cluster.NewTestNamespace(t)
			s := startPausedRollout(t, ns, nodeCount, map[string]string{
				rolloutapi.AnnotationMaxUnavailable: strconv.Itoa(budget), rolloutapi.AnnotationSteps: "2,pause,100%",
			}, 2)
			// Resume the last step and stop the component at once, while the controller acts on
			// it: most of the nodes are still to be updated, one at a time.
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"1"}}}`, rolloutapi.AnnotationResume)
			if _, err := cluster.Client.AppsV1().DaemonSets(ns).Patch(ctx, "nginx-ds", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			ds, err := getDS(ctx, ns)
			if err != nil {
				t.Fatal(err)
			}
			updated := updatedCount(ds)
			if updated >= nodeCount {
				t.Fatalf("the rollout completed before %s was stopped", component)
			}
			// A watch that was cut catches up in one burst, the deletions it missed before the
			// pods that replaced them, which no client can tell from pods really missing at once.
			// So one sampler watches up to the stop and a new one from the restart on: the
			// controller acts only on what it can see, and both see all of that.
			s.Stop()
			stopped := time.Now()
			if err := cluster.StopComponent(component); err != nil {
				t.Fatal(err)
			}
			startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if err := cluster.StartComponent(startCtx, component); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s stopped at %d of %d pods updated and served again after %s", component, updated, nodeCount, time.Since(stopped).Round(time.Millisecond))
			after := sampleBudget(t, ns)

			// The same webhook server still mutates DaemonSet writes.
			cluster.WaitFor(t, 2*time.Minute, "the webhook mutates a DaemonSet after the restart", func(ctx context.Context) (bool, string) {
				mutated, err := harness.Mutates(ctx, cluster)
				return mutated, fmt.Sprintf("mutated %v, %v", mutated, err)
			})
			// The same controller finishes the rollout.
			waitSettled(t, ns, "nginx:1.24.0", nodeCount)
			ds = waitPhase(t, ns, rolloutapi.PhaseComplete, 2*time.Minute)
			if got := ds.Annotations[rolloutapi.StatusUpdated]; got != fmt.Sprintf("%d/%d", nodeCount, nodeCount) {
				t.Errorf("%s = %q, want all %d nodes updated", rolloutapi.StatusUpdated, got, nodeCount)
			}
			// The rollout may finish before the new sampler has listed (etcd's restart leaves the
			// API server up, and the controller may finish within a second): the first sampler
			// must have seen the canary step replace pods, the second sees what is left.
			s.CheckBudget(t, budget) // before the stop
			after.CheckBudget(t, budget)
			if before, beforeSamples := s.MaxUnavailable(), s.Samples(); before == 0 {
				t.Errorf("the first sampler saw no pod replaced (max unavailable %d over %d samples)", before, beforeSamples)
			}
			for _, err := range []error{ctl.Running(), wh.Running()} {
				if err != nil {
					t.Errorf("%v after the %s restart", err, component)
				}
			}
		})
	}
}

// updatedCount reads the count of updated pods from the status annotation "<updated>/<desired>".
func updatedCount(ds *appsv1.DaemonSet) int {
	n, _ := strconv.Atoi(strings.SplitN(ds.Annotations[rolloutapi.StatusUpdated], "/", 2)[0])
	return n
}
