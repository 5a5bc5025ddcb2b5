package rollout_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// 20 nodes: one tainted control-plane node and 19 workers over three zones.
const nodeCount = 20

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	nodes := append([]localcluster.Node{localcluster.ControlPlaneNode("control-plane-0")}, localcluster.WorkerNodes("worker", nodeCount-1)...)
	os.Exit(localcluster.RunTests(m, localcluster.Config{Nodes: nodes}, &cluster))
}

// managedDS is the seed's nginx-ds opted in to daemonguard's rollouts, tolerating the
// control-plane taint so it runs on all 20 nodes.
func managedDS(image string, annotations map[string]string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: nginx-ds\n  labels: {app: nginx-ds}\n  annotations:\n    daemonguard.io/rollout: managed\n")
	for k, v := range annotations {
		fmt.Fprintf(&b, "    %s: %q\n", k, v)
	}
	fmt.Fprintf(&b, `spec:
  revisionHistoryLimit: 10
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: nginx-ds}}
  template:
    metadata: {labels: {app: nginx-ds}}
    spec:
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
      containers:
      - name: nginx-ds
        image: %s
        ports: [{containerPort: 80}]
`, image)
	return b.String()
}

func kubectl(t *testing.T, stdin string, args ...string) {
	t.Helper()
	out, errOut, err := cluster.Kubectl(context.Background(), stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
}

func startController(t *testing.T) *harness.Controller {
	t.Helper()
	ctl, err := harness.StartController(context.Background(), cluster)
	if err != nil {
		t.Fatal(err)
	}
	return ctl
}

func getDS(ctx context.Context, ns string) (*appsv1.DaemonSet, error) {
	return cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, "nginx-ds", metav1.GetOptions{})
}

func condition(ds *appsv1.DaemonSet, t rolloutapi.Phase) *appsv1.DaemonSetCondition {
	for i := range ds.Status.Conditions {
		if string(ds.Status.Conditions[i].Type) == string(t) && ds.Status.Conditions[i].Status == corev1.ConditionTrue {
			return &ds.Status.Conditions[i]
		}
	}
	return nil
}

// waitPhase waits until the given rollout condition of nginx-ds is True.
func waitPhase(t *testing.T, ns string, phase rolloutapi.Phase, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	return waitPhaseOf(t, ns, "nginx-ds", phase, timeout)
}

// waitPhaseOf waits until the given rollout condition of the named DaemonSet is True.
func waitPhaseOf(t *testing.T, ns, name string, phase rolloutapi.Phase, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	var ds *appsv1.DaemonSet
	cluster.WaitFor(t, timeout, name+" rollout condition "+string(phase), func(ctx context.Context) (bool, string) {
		got, err := cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ds = got
		return condition(got, phase) != nil, fmt.Sprintf("conditions %+v annotations %v", got.Status.Conditions, got.Annotations)
	})
	return ds
}

// waitSettled waits until each of want reachable nodes runs exactly one pod of nginx-ds, Ready and
// with image (terminating pods count, so none may be left). Nodes that are unreachable or gone are
// not counted, nor their pods: a kubelet that stopped acting never finishes a deletion.
func waitSettled(t *testing.T, ns string, image string, want int) {
	t.Helper()
	cluster.WaitFor(t, 3*time.Minute, "all pods running "+image, func(ctx context.Context) (bool, string) {
		nodes, err := cluster.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=nginx-ds"})
		if err != nil {
			return false, err.Error()
		}
		perNode := map[string][]*corev1.Pod{}
		for i := range pods.Items {
			perNode[pods.Items[i].Spec.NodeName] = append(perNode[pods.Items[i].Spec.NodeName], &pods.Items[i])
		}
		reachable, settled := 0, 0
		for i := range nodes.Items {
			if !rolloutplan.Reachable(&nodes.Items[i]) {
				continue
			}
			reachable++
			ps := perNode[nodes.Items[i].Name]
			if len(ps) == 1 && ps[0].DeletionTimestamp == nil && ps[0].Spec.Containers[0].Image == image && podReady(ps[0]) {
				settled++
			}
		}
		return reachable == want && settled == want, fmt.Sprintf("%d of %d reachable nodes (want %d) run one ready pod with %s", settled, reachable, want, image)
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// sampler watches the nodes and the namespace's pods and records, after every event, how many
// reachable nodes lack an available pod, how many pods run a given image and which images each
// node ran: a continuous sample, not an end state.
type sampler struct {
	mu             sync.Mutex
	nodes          map[string]*corev1.Node
	pods           map[string]*corev1.Pod
	maxUnavailable int
	maxWithImage   int
	image          string
	imagesOn       map[string]map[string]bool // node -> images of its non-terminating pods, ever
	samples        int
	synced         bool // both initial lists are in; before that the maps are partial
	stop           chan struct{}
	stopOnce       sync.Once
}

// stopWatching stops the sampler's informers; its samples so far stay readable.
func (s *sampler) stopWatching() { s.stopOnce.Do(func() { close(s.stop) }) }

func startSampler(t *testing.T, ns, image string) *sampler {
	t.Helper()
	s := &sampler{nodes: map[string]*corev1.Node{}, pods: map[string]*corev1.Pod{}, imagesOn: map[string]map[string]bool{}, image: image, stop: make(chan struct{})}
	pods := informers.NewSharedInformerFactoryWithOptions(cluster.Client, 0, informers.WithNamespace(ns)).Core().V1().Pods().Informer()
	nodes := informers.NewSharedInformerFactory(cluster.Client, 0).Core().V1().Nodes().Informer()
	record := func(obj any, deleted bool) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		switch o := obj.(type) {
		case *corev1.Pod:
			if deleted {
				delete(s.pods, o.Name)
			} else {
				s.pods[o.Name] = o
			}
		case *corev1.Node:
			if deleted {
				delete(s.nodes, o.Name)
			} else {
				s.nodes[o.Name] = o
			}
		default:
			return
		}
		if s.synced {
			s.sample()
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { record(o, false) },
		UpdateFunc: func(_, o any) { record(o, false) },
		DeleteFunc: func(o any) { record(o, true) },
	}
	for _, inf := range []cache.SharedIndexInformer{pods, nodes} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			t.Fatal(err)
		}
		go inf.Run(s.stop)
	}
	if !cache.WaitForCacheSync(s.stop, pods.HasSynced, nodes.HasSynced) {
		t.Fatal("informers did not sync")
	}
	s.mu.Lock()
	s.synced = true
	s.sample()
	s.mu.Unlock()
	t.Cleanup(s.stopWatching)
	return s
}

// sample records one observation; s.mu is held.
func (s *sampler) sample() {
	availableOn := map[string]bool{}
	withImage := 0
	for _, p := range s.pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if podReady(p) {
			availableOn[p.Spec.NodeName] = true
		}
		if p.Spec.Containers[0].Image == s.image {
			withImage++
		}
		if p.Spec.NodeName != "" {
			if s.imagesOn[p.Spec.NodeName] == nil {
				s.imagesOn[p.Spec.NodeName] = map[string]bool{}
			}
			s.imagesOn[p.Spec.NodeName][p.Spec.Containers[0].Image] = true
		}
	}
	unavailable := 0
	for name, n := range s.nodes {
		if rolloutplan.Reachable(n) && !availableOn[name] {
			unavailable++
		}
	}
	s.maxUnavailable = max(s.maxUnavailable, unavailable)
	s.maxWithImage = max(s.maxWithImage, withImage)
	s.samples++
}

func (s *sampler) result() (maxUnavailable, maxWithImage, samples int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxUnavailable, s.maxWithImage, s.samples
}

// imagesSeenOn lists the images the node's pods ran while the sampler watched.
func (s *sampler) imagesSeenOn(node string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for image := range s.imagesOn[node] {
		out = append(out, image)
	}
	sort.Strings(out)
	return out
}

// startPausedRollout deploys nginx:1.7.9 on nodes nodes with the given settings, whose first
// step updates canary nodes and the second pauses, rolls out nginx:1.24.0 and returns once the
// rollout is paused after its canary step, with a sampler watching.
func startPausedRollout(t *testing.T, ns string, nodes int, settings map[string]string, canary int) *sampler {
	t.Helper()
	kubectl(t, managedDS("nginx:1.7.9", settings), "apply", "-n", ns, "-f", "-")
	waitSettled(t, ns, "nginx:1.7.9", nodes)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	s := startSampler(t, ns, "nginx:1.24.0")
	kubectl(t, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds=nginx:1.24.0")
	ds := waitPhase(t, ns, rolloutapi.PhasePaused, time.Minute)
	if got := ds.Annotations[rolloutapi.StatusStep]; !strings.HasPrefix(got, "2/3") {
		t.Fatalf("paused at step %q, want 2/3", got)
	}
	if got, want := ds.Annotations[rolloutapi.StatusUpdated], fmt.Sprintf("%d/", canary); !strings.HasPrefix(got, want) {
		t.Fatalf("paused with %s = %q, want %d nodes updated", rolloutapi.StatusUpdated, got, canary)
	}
	return s
}

func TestManagedRolloutStaysWithinBudgetAtEveryInstant(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	kubectl(t, managedDS("nginx:1.7.9", map[string]string{rolloutapi.AnnotationMaxUnavailable: "2"}), "apply", "-n", ns, "-f", "-")
	waitSettled(t, ns, "nginx:1.7.9", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)

	s := startSampler(t, ns, "nginx:1.24.0")
	kubectl(t, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds=nginx:1.24.0")
	waitSettled(t, ns, "nginx:1.24.0", nodeCount)
	ds := waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)

	maxUnavailable, _, samples := s.result()
	t.Logf("max unavailable %d over %d samples", maxUnavailable, samples)
	if maxUnavailable > 2 {
		t.Errorf("%d nodes were unavailable at once, budget 2", maxUnavailable)
	}
	if maxUnavailable == 0 || samples < nodeCount {
		t.Errorf("sampler saw no rollout (max unavailable %d, %d samples)", maxUnavailable, samples)
	}
	if got := ds.Annotations[rolloutapi.StatusUpdated]; got != "20/20" {
		t.Errorf("status %s = %q, want 20/20", rolloutapi.StatusUpdated, got)
	}
}

func TestFailingImageHaltsAfterFirstStepAndRollForwardCompletes(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	kubectl(t, managedDS("nginx:1.7.9", nil), "apply", "-n", ns, "-f", "-")
	waitSettled(t, ns, "nginx:1.7.9", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)

	s := startSampler(t, ns, "nginx:1.91")
	kubectl(t, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds=nginx:1.91")
	ds := waitPhase(t, ns, rolloutapi.PhaseFailed, 2*time.Minute)
	failed := condition(ds, rolloutapi.PhaseFailed)
	if failed.Reason != "PodFailure" || !strings.Contains(failed.Message, "ImagePullBackOff") {
		t.Errorf("Failed condition %s: %s, want PodFailure naming ImagePullBackOff", failed.Reason, failed.Message)
	}
	cluster.WaitFor(t, time.Minute, "a RolloutFailed event naming the node", func(ctx context.Context) (bool, string) {
		evs, err := cluster.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "RolloutFailed" && strings.Contains(e.Note, "worker-0: ImagePullBackOff") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// Roll forward with a good image: the failure belongs to the old revision.
	kubectl(t, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds=nginx:1.25.5")
	waitSettled(t, ns, "nginx:1.25.5", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	_, touched, _ := s.result()
	if touched > 1 {
		t.Errorf("%d nodes ran the broken image at once; the budget is 1", touched)
	}
	if touched == 0 {
		t.Error("the sampler never saw the broken image")
	}
}

// Pods that run but never become Ready (nginx:never-ready, see the kwok stage
// pod-running-not-ready.yaml) show no failure of their own: the progress deadline halts the
// rollout, and the condition and the Event say so, with the deadline, the nodes, since when, and
// how to get out. Later reconciles (the controller's own status write triggers one) keep saying it.
func TestNeverReadyPodsHaltOnTheProgressDeadlineAndSaySo(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	defer ctl.Stop()
	ns := cluster.NewTestNamespace(t)
	kubectl(t, managedDS("nginx:1.7.9", map[string]string{rolloutapi.AnnotationMaxUnavailable: "2", rolloutapi.AnnotationProgressDeadline: "5s"}), "apply", "-n", ns, "-f", "-")
	waitSettled(t, ns, "nginx:1.7.9", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)

	kubectl(t, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds=nginx:never-ready")
	ds := waitPhase(t, ns, rolloutapi.PhaseFailed, 2*time.Minute)
	failed := condition(ds, rolloutapi.PhaseFailed)
	for _, want := range []string{
		"step 1/1 (100%): new pods not Ready within the progress deadline of 5s",
		"new pods not available on 2 of 20 nodes: worker-0: not Ready since ", ", worker-1: not Ready since ",
		"no further pods are replaced; fix the template and apply it to roll forward, or roll back with: daemonguard rollout undo ds/nginx-ds -n " + ns,
	} {
		if failed.Reason != rolloutapi.ReasonProgressDeadline || !strings.Contains(failed.Message, want) {
			t.Errorf("Failed condition %s: %q, want %s naming %q", failed.Reason, failed.Message, rolloutapi.ReasonProgressDeadline, want)
		}
	}
	cluster.WaitFor(t, time.Minute, "a RolloutFailed event saying what the condition says", func(ctx context.Context) (bool, string) {
		evs, err := cluster.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == "RolloutFailed" && e.Type == corev1.EventTypeWarning && e.Note == failed.Reason+": "+failed.Message {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none with note %q", len(evs.Items), failed.Reason+": "+failed.Message)
	})
	ds, err := getDS(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if again := condition(ds, rolloutapi.PhaseFailed); again == nil || again.Reason != failed.Reason || again.Message != failed.Message {
		t.Errorf("after later reconciles the Failed condition is %+v, want it unchanged: %s: %s", again, failed.Reason, failed.Message)
	}
}

func TestRestartMidRolloutResumesWithoutOvershoot(t *testing.T) {
	localcluster.NeedCluster(t)
	ctl := startController(t)
	ns := cluster.NewTestNamespace(t)
	// Stop the controller while the canary step's timed pause runs: mid-rollout.
	s := startPausedRollout(t, ns, nodeCount, map[string]string{
		rolloutapi.AnnotationMaxUnavailable: "3", rolloutapi.AnnotationSteps: "3,pause:4s,100%",
	}, 3)
	if err := ctl.Stop(); err != nil {
		t.Fatalf("controller stopped with %v", err)
	}
	ctl = startController(t)
	defer ctl.Stop()
	waitSettled(t, ns, "nginx:1.24.0", nodeCount)
	waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	maxUnavailable, _, _ := s.result()
	if maxUnavailable > 3 || maxUnavailable == 0 {
		t.Errorf("max unavailable %d across the restart, want 1..3", maxUnavailable)
	}
}
