package rollout

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// relistingPods is a pod API for one informer: List answers the pods it holds; a watch passes on
// the events sent to it until it is expired, after which the next watch is refused as too old,
// and the informer lists again.
type relistingPods struct {
	mu      sync.Mutex
	pods    map[string]*corev1.Pod
	rv      int
	watcher *watch.FakeWatcher
	expired bool
	lists   int
}

func (s *relistingPods) List(metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(s.rv)}}
	for _, p := range s.pods {
		list.Items = append(list.Items, *p.DeepCopy())
	}
	return list, nil
}

func (s *relistingPods) Watch(metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.expired {
		s.expired = false
		return nil, apierrors.NewResourceExpired("too old resource version")
	}
	s.watcher = watch.NewFake()
	return s.watcher, nil
}

// IsWatchListSemanticsUnSupported makes the informer list and then watch, as against an API server
// without streamed lists.
func (s *relistingPods) IsWatchListSemanticsUnSupported() bool { return true }

// deleteUnseen deletes the pod while no watch is open to see it, and ends the watch: the
// informer's next watch is refused and it lists again.
func (s *relistingPods) deleteUnseen(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pods, name)
	s.rv++
	s.expired = true
	s.watcher.Stop()
}

// A pod deleted while the controller's pod watch is down reaches the tracker through the
// informer's relist: the new list lacks it, the informer drops it from its store and hands the
// watch's handler a tombstone, which controller-runtime unwraps for the map function. The mark
// comes after the store lost the pod, so the next reconcile reads it gone.
func TestAPodDeletedUnseenIsMarkedByTheRelist(t *testing.T) {
	ds := types.NamespacedName{Namespace: "mon", Name: "agent"}
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: name, ResourceVersion: "1",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: "ds-uid", Controller: ptr.To(true)}}}}
	}
	api := &relistingPods{pods: map[string]*corev1.Pod{"kept": pod("kept"), "deleted": pod("deleted")}, rv: 1}
	informer := toolscache.NewSharedIndexInformer(api, &corev1.Pod{}, 0, toolscache.Indexers{})
	tracker := newChanges(-1)
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer queue.ShutDown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &source.Informer{Informer: informer, Handler: handler.EnqueueRequestsFromMapFunc(tracker.podsOf(controllingDaemonSet))}
	if err := src.Start(ctx, queue); err != nil {
		t.Fatal(err)
	}
	tracker.arm(ds, "ds-uid", t0)
	go informer.RunWithContext(ctx)
	marked := func(name string) func() bool {
		return func() bool {
			tracker.mu.Lock()
			defer tracker.mu.Unlock()
			_, ok := tracker.byDS[ds].pods[name]
			return ok
		}
	}
	// The handler has seen both pods listed; a reconcile reads everything from here on.
	waitFor(t, "the listed pods marked", func() bool { return marked("kept")() && marked("deleted")() })
	tracker.arm(ds, "ds-uid", t0)

	// The watch must be open before the pod is deleted: the deletion ends it.
	waitFor(t, "the informer's watch", func() bool {
		api.mu.Lock()
		defer api.mu.Unlock()
		return api.watcher != nil
	})
	api.deleteUnseen("deleted")
	waitFor(t, "the deleted pod marked", marked("deleted"))
	// The relist also hands the handler the pod it still lists, as an update: a mark that costs
	// a look-up.
	pods, nodes, ok := tracker.drain(ds, "ds-uid", t0)
	if !ok || !slices.Contains(pods, "deleted") || len(nodes) != 0 {
		t.Fatalf("drained %v, %v, %v; want the deleted pod among the pods", pods, nodes, ok)
	}
	if queue.Len() == 0 {
		t.Error("the DaemonSet was marked but not enqueued")
	}
	api.mu.Lock()
	lists := api.lists
	api.mu.Unlock()
	if lists != 2 {
		t.Errorf("the informer listed %d times; want the first list and the relist", lists)
	}
	store := &informerStore{pods: informer.GetIndexer(), nodes: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})}
	ch, err := store.changed(ds.Namespace, "ds-uid", pods, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ch.GonePods, []string{"deleted"}) || len(ch.Pods) != len(pods)-1 {
		t.Errorf("the reconcile read %d pods and %v gone of %v; want the deleted pod gone, the rest read", len(ch.Pods), ch.GonePods, pods)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
