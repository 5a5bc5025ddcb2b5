package rollout

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// BenchmarkReconcileGatherDecide is one reconcile of a managed rollout on 5,000 nodes, but for its
// writes: gather reads the DaemonSet's ControllerRevisions, its pods and every node from client-go
// indexers as the manager's informers hold them (the informerStore of the manager, and the
// revisions as controller-runtime's cache reader lists a namespace), then decide plans through
// the DaemonSet's memo. Between two reconciles four pods change readiness (new objects, new
// resourceVersions, updated in the indexer outside the timing); the rollout is under way, 2,000
// nodes updated, and its status annotations are the first reconcile's report. The deleted=500
// case remembers 500 pods this process deleted (a wave of 10%). The followed cases are told of
// the changed pods, as the informers' event handlers tell the controller (follow.go), and read
// those alone. No cluster is needed:
//
//	go test -short -run '^$' -bench ReconcileGatherDecide -benchmem ./controller/rollout/
func BenchmarkReconcileGatherDecide(b *testing.B) {
	const nodes, updated, changed, window = 5000, 2000, 4, 64
	for _, bc := range []struct {
		deleted  int
		followed bool
	}{{0, false}, {500, false}, {0, true}, {500, true}} {
		deleted := bc.deleted
		name := fmt.Sprintf("nodes=%d/deleted=%d", nodes, deleted)
		if bc.followed {
			name += "/followed"
		}
		b.Run(name, func(b *testing.B) {
			const uid = "ds-uid"
			ds := managedAgent(uid, "agent:2")
			ds.Annotations[rolloutapi.AnnotationMaxUnavailable] = "10%"
			ds.Annotations[rolloutapi.AnnotationSteps] = ""
			rv := 0
			nextRV := func() string { rv++; return strconv.Itoa(rv) }
			revisions := revisionIndexer(b, uid)
			store := indexedStore()
			podIndex, nodeIndex := store.pods, store.nodes
			var pods []*corev1.Pod
			for i := range nodes {
				name := fmt.Sprintf("node-%04d", i)
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: nextRV(),
					Labels: map[string]string{"kubernetes.io/hostname": name}},
					Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
				rev := oldRev
				if i < updated {
					rev = newRev
				}
				pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mon", Name: "agent-" + name, UID: types.UID("uid-agent-" + name),
					// A string of its own, as each pod decoded from a watch event has.
					ResourceVersion: nextRV(), Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: strings.Clone(rev)},
					CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour)),
					OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: uid, Controller: ptr.To(true)}}},
					Spec: corev1.PodSpec{NodeName: name},
					Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
						LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}}}}
				for _, add := range []error{nodeIndex.Add(node), podIndex.Add(pod)} {
					if add != nil {
						b.Fatal(add)
					}
				}
				pods = append(pods, pod)
			}
			r := &Reconciler{Client: indexerClient{revisions: revisions}, Store: store,
				Clock: clocktesting.NewFakePassiveClock(t0)}
			if bc.followed {
				r.changes = newChanges(-1)
			}
			var refs []rolloutplan.PodRef
			for _, p := range pods[updated+window : updated+window+deleted] {
				refs = append(refs, rolloutplan.PodRef{Name: p.Name, UID: string(p.UID), Node: p.Spec.NodeName})
			}
			r.remember(refs, slices.Repeat([]bool{true}, len(refs)), t0)
			ctx, log := context.Background(), logr.Discard()
			reconcile := func() Decision {
				// What Client.Get gives each reconcile: a copy of the cache's DaemonSet.
				f, err := r.gather(ctx, log, ds.DeepCopy())
				if err != nil {
					b.Fatal(err)
				}
				return decide(f)
			}
			// The first report, written as apply would: later reconciles find their status.
			for k, v := range reconcile().Annotations {
				if v != nil {
					ds.Annotations[k] = *v
				}
			}
			for b.Loop() {
				b.StopTimer()
				for range changed {
					i := updated + rv%window // old pods: the plan's deletions stay the same
					p := pods[i].DeepCopy()
					p.ResourceVersion = nextRV()
					c := &p.Status.Conditions[0]
					c.Status = map[corev1.ConditionStatus]corev1.ConditionStatus{corev1.ConditionTrue: corev1.ConditionFalse, corev1.ConditionFalse: corev1.ConditionTrue}[c.Status]
					if err := podIndex.Update(p); err != nil {
						b.Fatal(err)
					}
					if r.changes != nil { // as the pod informer's handler marks it
						r.changes.markPod(client.ObjectKeyFromObject(ds), p.Name)
					}
					pods[i] = p
				}
				b.StartTimer()
				if d := reconcile(); d.Plan == nil || d.Plan.Desired != nodes {
					b.Fatalf("the plan covers %v, want %d nodes", d.Plan, nodes)
				}
			}
		})
	}
}

// benchRevision is the ControllerRevision n of the DaemonSet of uid with hash, its data stripped
// as the controller's cache holds it (stripRevision).
func benchRevision(uid types.UID, hash string, n int64) *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mon", Name: "agent-" + hash, Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: uid, Controller: ptr.To(true)}}},
		Revision: n,
	}
}

// indexedStore is an informerStore on client-go indexers indexed as the manager's informers are
// (newStore): the pods by their controller's UID.
func indexedStore() *informerStore {
	return &informerStore{
		pods:  toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{controllerUIDIndex: controllerUID}),
		nodes: toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{}),
	}
}

// revisionIndexer holds the ControllerRevisions 1 and 2 (oldRev, newRev) of the DaemonSet of uid,
// as benchRevision makes them, indexed by namespace as indexerClient lists them.
func revisionIndexer(tb testing.TB, uid types.UID) toolscache.Indexer {
	tb.Helper()
	revisions := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	for i, hash := range []string{oldRev, newRev} {
		cr := benchRevision(uid, hash, int64(i+1))
		cr.ResourceVersion = strconv.Itoa(i + 1)
		if err := revisions.Add(cr); err != nil {
			tb.Fatal(err)
		}
	}
	return revisions
}

// indexerClient lists ControllerRevisions as controller-runtime's cache reader does with
// UnsafeDisableDeepCopy: the namespace's objects from the informer's namespace index, set into
// the list. It reads nothing else: the reconcile the benchmark runs reads nothing else through
// its Client.
type indexerClient struct {
	client.Client
	revisions toolscache.Indexer
}

func (c indexerClient) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*appsv1.ControllerRevisionList); !ok {
		return fmt.Errorf("list %T: the benchmark's client lists ControllerRevisions only", list)
	}
	var lo client.ListOptions
	lo.ApplyOptions(opts)
	objs, err := c.revisions.ByIndex(toolscache.NamespaceIndex, lo.Namespace)
	if err != nil {
		return err
	}
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		obj, ok := o.(runtime.Object)
		if !ok {
			return fmt.Errorf("list: %T in the indexer is no runtime.Object", o)
		}
		out[i] = obj
	}
	return apimeta.SetList(list, out)
}
