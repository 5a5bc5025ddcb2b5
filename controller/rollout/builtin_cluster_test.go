package rollout_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// fiveNodeDS is a DaemonSet on worker-0 to worker-4 only, with the built-in RollingUpdate
// (maxUnavailable 1) or managed by daemonguard (default budget 1).
func fiveNodeDS(name, image string, managed bool) string {
	strategy, annotations := "{type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}", "{}"
	if managed {
		strategy, annotations = "{type: OnDelete}", "{daemonguard.io/rollout: managed}"
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: %[1]s, annotations: %[2]s}
spec:
  updateStrategy: %[3]s
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions:
              - {key: kubernetes.io/hostname, operator: In, values: [worker-0, worker-1, worker-2, worker-3, worker-4]}
      containers: [{name: nginx, image: %[4]q}]
`, name, annotations, strategy, image)
}

// dsView is what the test reads of one DaemonSet and its pods at one instant.
type dsView struct {
	ds          *appsv1.DaemonSet
	newRevision string        // controller-revision-hash of the newest ControllerRevision
	newPods     []*corev1.Pod // non-terminating pods at newRevision
	oldReady    int           // non-terminating pods at another revision, Ready
	terminating int
}

func viewDS(ctx context.Context, ns, name string) (*dsView, error) {
	ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	revs, err := cluster.Client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return nil, err
	}
	v := &dsView{ds: ds}
	var newest int64 = -1
	for _, r := range revs.Items {
		if metav1.IsControlledBy(&r, ds) && r.Revision > newest {
			newest, v.newRevision = r.Revision, r.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
		}
	}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case p.DeletionTimestamp != nil:
			v.terminating++
		case p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == v.newRevision:
			v.newPods = append(v.newPods, p)
		case clustertest.PodReady(p):
			v.oldReady++
		}
	}
	return v, nil
}

// stuckOnOneBrokenPod tells whether the view is the state both rollouts must stay in: the
// DaemonSet controller has observed the new template, exactly one pod runs it, in
// ImagePullBackOff and unavailable, and the other four old pods are still Ready.
func (v *dsView) stuckOnOneBrokenPod() (bool, string) {
	s := v.ds.Status
	state := fmt.Sprintf("generation %d observed %d, updated %d, unavailable %d, %d new pods, %d old ready, %d terminating",
		v.ds.Generation, s.ObservedGeneration, s.UpdatedNumberScheduled, s.NumberUnavailable, len(v.newPods), v.oldReady, v.terminating)
	ok := s.ObservedGeneration == v.ds.Generation && s.UpdatedNumberScheduled == 1 && s.NumberUnavailable == 1 &&
		len(v.newPods) == 1 && !clustertest.PodReady(v.newPods[0]) && waitingReason(v.newPods[0]) == "ImagePullBackOff" &&
		v.oldReady == 4 && v.terminating == 0
	return ok, state
}

func waitingReason(p *corev1.Pod) string {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Waiting != nil {
			return cs.State.Waiting.Reason
		}
	}
	return ""
}

// The upstream behaviour the rollout controller exists for, next to the fix. With a broken image
// on 5 nodes, the built-in RollingUpdate (maxUnavailable 1) replaces one pod, then waits for it
// forever: no condition, no event says so. daemonguard's managed rollout also stops after one
// pod, and says why: a Failed condition and a RolloutFailed event.
func TestBuiltinRollingUpdateWaitsSilentlyWhereManagedRolloutFails(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	ctx := context.Background()
	clustertest.Kubectl(t, cluster, fiveNodeDS("builtin", "nginx:1.7.9", false), "apply", "-n", ns, "-f", "-")
	clustertest.Kubectl(t, cluster, fiveNodeDS("managed", "nginx:1.7.9", true), "apply", "-n", ns, "-f", "-")
	for _, name := range []string{"builtin", "managed"} {
		clustertest.WaitDaemonSet(t, cluster, ns, name, 2*time.Minute, name+" on 5 nodes", func(ds *appsv1.DaemonSet) (bool, string) {
			s := ds.Status
			return s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled == 5 && s.NumberAvailable == 5 && s.UpdatedNumberScheduled == 5, fmt.Sprintf("%+v", s)
		})
		clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/"+name, "nginx=nginx:1.91")
	}

	// Both reach the state: one broken pod, four old ones.
	var broken *corev1.Pod
	for _, name := range []string{"builtin", "managed"} {
		cluster.WaitFor(t, 2*time.Minute, name+" to replace one pod with a broken one", func(ctx context.Context) (bool, string) {
			v, err := viewDS(ctx, ns, name)
			if err != nil {
				return false, err.Error()
			}
			ok, state := v.stuckOnOneBrokenPod()
			if ok && name == "builtin" {
				broken = v.newPods[0]
			}
			return ok, state
		})
	}
	managedFailed := waitPhaseOf(t, ns, "managed", rolloutapi.PhaseFailed, time.Minute)
	if c := clustertest.RolloutCondition(managedFailed, rolloutapi.PhaseFailed); c.Reason != "PodFailure" || !strings.Contains(c.Message, "worker-0: ImagePullBackOff") {
		t.Errorf("managed Failed condition %s: %q, want PodFailure naming worker-0: ImagePullBackOff", c.Reason, c.Message)
	}

	// Give the DaemonSet controller every chance to act: touch the broken pod (a pod update
	// enqueues its DaemonSet), then observe both DaemonSets once a second until the pod has been
	// in ImagePullBackOff for a whole window since. Every observation must show the same state,
	// and the built-in DaemonSet no condition.
	clustertest.Kubectl(t, cluster, "", "annotate", "-n", ns, "pod/"+broken.Name, "daemonguard.io/test-nudge=1")
	const window, minObservations = 15 * time.Second, 10
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	observations := 0
	for time.Since(start) < window || observations < minObservations {
		if time.Since(start) > window+time.Minute {
			t.Fatalf("only %d observations in %s", observations, time.Since(start).Round(time.Second))
		}
		<-tick.C
		for _, name := range []string{"builtin", "managed"} {
			v, err := viewDS(ctx, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			if ok, state := v.stuckOnOneBrokenPod(); !ok {
				t.Fatalf("%s left the state after %s: %s", name, time.Since(start).Round(time.Second), state)
			}
			if name == "builtin" && len(v.ds.Status.Conditions) != 0 {
				t.Fatalf("the built-in DaemonSet has conditions %+v", v.ds.Status.Conditions)
			}
		}
		observations++
	}
	t.Logf("same state in %d observations over %s", observations, time.Since(start).Round(time.Second))

	// Events about the built-in DaemonSet only report the pods it replaced, nothing about the stop.
	evs, err := cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=DaemonSet,involvedObject.name=builtin"})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, e := range evs.Items {
		reasons[e.Reason]++
		if e.Type != corev1.EventTypeNormal || (e.Reason != "SuccessfulCreate" && e.Reason != "SuccessfulDelete") {
			t.Errorf("built-in DaemonSet has event %s %s: %s", e.Type, e.Reason, e.Message)
		}
	}
	if reasons["SuccessfulDelete"] == 0 {
		t.Errorf("no SuccessfulDelete event on the built-in DaemonSet (events by reason: %v): the query sees nothing", reasons)
	}
	cluster.WaitFor(t, time.Minute, "a RolloutFailed event on the managed DaemonSet", func(ctx context.Context) (bool, string) {
		evs, err := cluster.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=DaemonSet,involvedObject.name=managed"})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "RolloutFailed" && strings.Contains(e.Message, "worker-0: ImagePullBackOff") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})
}
