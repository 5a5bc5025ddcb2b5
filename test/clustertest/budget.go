package clustertest

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// SamplerOptions says which pods and nodes a BudgetSampler counts.
type SamplerOptions struct {
	// Selector is a label selector for the DaemonSet's pods in the namespace; empty counts every
	// pod there.
	Selector string
	// Nodes, when set, are the nodes the DaemonSet must run on, each counted whatever its state.
	// When empty the sampler watches the nodes and counts every reachable one (NodeReachable),
	// as the rollout controller does.
	Nodes []string
}

// BudgetSampler watches a namespace's pods (and the nodes, unless SamplerOptions.Nodes names
// them) and records, after every event, how many counted nodes lack an available pod (Ready, not
// terminating), how many pods run each image and which images ran on each node: a continuous
// sample of a rollout, not its end state.
type BudgetSampler struct {
	opts SamplerOptions

	mu             sync.Mutex
	nodes          map[string]*corev1.Node
	pods           map[string]*corev1.Pod
	maxUnavailable int
	worst          string                     // why the nodes of the first sample with maxUnavailable lacked a pod
	maxRunning     map[string]int             // image -> most non-terminating pods with it at once
	imagesOn       map[string]map[string]bool // node -> images of its non-terminating pods, ever
	samples        int
	synced         bool // every initial list is in; before that the maps are partial

	stop     chan struct{}
	stopOnce sync.Once
}

// NewBudgetSampler starts a sampler on c's namespace ns, takes the first sample once its
// informers have listed, and stops it when the test ends.
func NewBudgetSampler(t testing.TB, c *localcluster.Cluster, ns string, opts SamplerOptions) *BudgetSampler {
	t.Helper()
	s := newBudgetSampler(opts)
	informerSet := []cache.SharedIndexInformer{
		informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = opts.Selector }),
		).Core().V1().Pods().Informer(),
	}
	if len(opts.Nodes) == 0 {
		informerSet = append(informerSet, informers.NewSharedInformerFactory(c.Client, 0).Core().V1().Nodes().Informer())
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.record(o, false) },
		UpdateFunc: func(_, o any) { s.record(o, false) },
		DeleteFunc: func(o any) { s.record(o, true) },
	}
	var synced []cache.InformerSynced
	for _, inf := range informerSet {
		if _, err := inf.AddEventHandler(handler); err != nil {
			t.Fatal(err)
		}
		go inf.Run(s.stop)
		synced = append(synced, inf.HasSynced)
	}
	if !cache.WaitForCacheSync(s.stop, synced...) {
		t.Fatal("the budget sampler's informers did not sync")
	}
	s.startSampling()
	t.Cleanup(s.Stop)
	return s
}

func newBudgetSampler(opts SamplerOptions) *BudgetSampler {
	return &BudgetSampler{
		opts: opts, nodes: map[string]*corev1.Node{}, pods: map[string]*corev1.Pod{},
		maxRunning: map[string]int{}, imagesOn: map[string]map[string]bool{}, stop: make(chan struct{}),
	}
}

// startSampling takes the first sample, of the complete initial lists, and one after every
// later event.
func (s *BudgetSampler) startSampling() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.synced = true
	s.sample()
}

// record applies one informer event and samples.
func (s *BudgetSampler) record(obj any, deleted bool) {
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

// sample records one observation; s.mu is held.
func (s *BudgetSampler) sample() {
	availableOn := map[string]bool{}
	running := map[string]int{}
	terminatingOn, notReadyOn := map[string]bool{}, map[string]bool{}
	for _, p := range s.pods {
		if p.DeletionTimestamp != nil {
			terminatingOn[p.Spec.NodeName] = true
			continue
		}
		image := p.Spec.Containers[0].Image
		if PodReady(p) {
			availableOn[p.Spec.NodeName] = true
		} else {
			notReadyOn[p.Spec.NodeName] = true
		}
		running[image]++
		if p.Spec.NodeName != "" {
			if s.imagesOn[p.Spec.NodeName] == nil {
				s.imagesOn[p.Spec.NodeName] = map[string]bool{}
			}
			s.imagesOn[p.Spec.NodeName][image] = true
		}
	}
	var notReady, terminating, missing []string
	counted := s.countedNodes()
	for _, name := range counted {
		switch {
		case availableOn[name]:
		case notReadyOn[name]:
			notReady = append(notReady, name)
		case terminatingOn[name]:
			terminating = append(terminating, name)
		default:
			missing = append(missing, name)
		}
	}
	if unavailable := len(notReady) + len(terminating) + len(missing); unavailable > s.maxUnavailable {
		s.maxUnavailable = unavailable
		for _, names := range [][]string{notReady, terminating, missing} {
			slices.Sort(names)
		}
		s.worst = fmt.Sprintf("%d of %d counted nodes (%d pods listed): a pod not Ready on %v, only terminating pods on %v, no pod on %v",
			unavailable, len(counted), len(s.pods), notReady, terminating, missing)
	}
	for image, n := range running {
		s.maxRunning[image] = max(s.maxRunning[image], n)
	}
	s.samples++
}

// countedNodes are the nodes the DaemonSet must be available on; s.mu is held.
func (s *BudgetSampler) countedNodes() []string {
	if len(s.opts.Nodes) > 0 {
		return s.opts.Nodes
	}
	var names []string
	for name, n := range s.nodes {
		if NodeReachable(n) {
			names = append(names, name)
		}
	}
	return names
}

// Stop stops the sampler's informers; its samples so far stay readable.
func (s *BudgetSampler) Stop() { s.stopOnce.Do(func() { close(s.stop) }) }

// MaxUnavailable is the most counted nodes seen without an available pod at once.
func (s *BudgetSampler) MaxUnavailable() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxUnavailable
}

// Worst says why the nodes of the first sample that saw MaxUnavailable lacked an available
// pod: a pod not Ready, only terminating pods, or no pod at all.
func (s *BudgetSampler) Worst() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.worst
}

// Samples is how many observations the sampler made.
func (s *BudgetSampler) Samples() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// MaxRunning is the most non-terminating pods seen with image at once.
func (s *BudgetSampler) MaxRunning(image string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxRunning[image]
}

// ImagesSeenOn lists, sorted, the images the node's pods ran while the sampler watched.
func (s *BudgetSampler) ImagesSeenOn(node string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for image := range s.imagesOn[node] {
		out = append(out, image)
	}
	sort.Strings(out)
	return out
}

// CheckBudget logs what the sampler saw and fails the test if more than budget counted nodes
// were without an available pod at once.
func (s *BudgetSampler) CheckBudget(t testing.TB, budget int) {
	t.Helper()
	maxUnavailable, samples := s.MaxUnavailable(), s.Samples()
	t.Logf("at most %d nodes without an available pod at once, over %d samples", maxUnavailable, samples)
	if maxUnavailable > budget {
		t.Errorf("%d nodes were without an available pod at once, budget %d: %s", maxUnavailable, budget, s.Worst())
	}
}

// CheckSawRollout fails the test if the sampler never saw a node without an available pod, or
// made fewer than minSamples observations: it watched no rollout, so its budget proves nothing.
func (s *BudgetSampler) CheckSawRollout(t testing.TB, minSamples int) {
	t.Helper()
	if maxUnavailable, samples := s.MaxUnavailable(), s.Samples(); maxUnavailable == 0 || samples < minSamples {
		t.Errorf("the sampler saw no rollout (max unavailable %d, %d samples)", maxUnavailable, samples)
	}
}

// PodReady is a pod whose Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// NodeReachable is a Ready node without the node lifecycle controller's not-ready or unreachable
// taints: one a rollout must keep its budget on. The controller has its own copy on purpose: the
// sampler checks the controller and must not share its mistakes.
func NodeReachable(n *corev1.Node) bool {
	if slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady
	}) {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
