package rollout

import (
	"context"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A reconcile reads its DaemonSet's pods and every node from the informers into the slices the
// DaemonSet's last reconcile read into: the same pods and nodes as a fresh read, a pod gone
// since left out, and never the slices of another DaemonSet, whose reconciles may run at the
// same time.
func TestReconcilesReadIntoTheirDaemonSetsSlices(t *testing.T) {
	store := indexedStore()
	podIndex, nodeIndex := store.pods, store.nodes
	add := func(indexer toolscache.Indexer, obj any) {
		t.Helper()
		if err := indexer.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(name string, uid types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mon", Name: name, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: uid, Controller: ptr.To(true)}}}}
	}
	a, b := managedAgent("a-uid", "agent:2"), managedAgent("b-uid", "agent:2")
	b.Name = "agent-b"
	for _, name := range []string{"n1", "n2", "n3"} {
		add(nodeIndex, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		add(podIndex, pod("a-"+name, a.UID))
		add(podIndex, pod("b-"+name, b.UID))
	}
	revB, revBNew := revision(t, b.UID, "b-old", 1, "agent:1"), revision(t, b.UID, "b-new", 2, "agent:2")
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(a, b,
		revision(t, a.UID, oldRev, 1, "agent:1"), revision(t, a.UID, newRev, 2, "agent:2"), revB, revBNew).Build()
	r := &Reconciler{Client: c, Store: store, Clock: clocktesting.NewFakePassiveClock(t0)}
	names := func(objs []metav1.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.GetName())
		}
		slices.Sort(out)
		return out
	}
	read := func(ds *appsv1.DaemonSet, wantPods ...string) ([]*corev1.Pod, []*corev1.Node) {
		t.Helper()
		f, err := r.gather(context.Background(), logr.Discard(), ds)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(metaOf(f.Pods)); !slices.Equal(got, wantPods) {
			t.Fatalf("%s read pods %v, want %v", ds.Name, got, wantPods)
		}
		if got, want := names(metaOf(f.Nodes)), []string{"n1", "n2", "n3"}; !slices.Equal(got, want) {
			t.Fatalf("%s read nodes %v, want %v", ds.Name, got, want)
		}
		return f.Pods, f.Nodes
	}
	podsA, nodesA := read(a, "a-n1", "a-n2", "a-n3")
	if err := podIndex.Delete(pod("a-n2", a.UID)); err != nil {
		t.Fatal(err)
	}
	againPods, againNodes := read(a, "a-n1", "a-n3")
	if &againPods[0] != &podsA[0] || &againNodes[0] != &nodesA[0] {
		t.Error("the second reconcile of a DaemonSet read into new slices, not its last reconcile's")
	}
	podsB, nodesB := read(b, "b-n1", "b-n2", "b-n3")
	if &podsB[0] == &podsA[0] || &nodesB[0] == &nodesA[0] {
		t.Error("another DaemonSet's reconcile read into the slices of the first")
	}
	if got := names(metaOf(againPods)); !slices.Equal(got, []string{"a-n1", "a-n3"}) {
		t.Errorf("another DaemonSet's reconcile changed the first's pods to %v", got)
	}
	r.forgetMemo(client.ObjectKeyFromObject(a))
	if _, kept := r.kept[client.ObjectKeyFromObject(a)]; kept {
		t.Error("the slices of a DaemonSet whose memo was forgotten are kept")
	}
}

func metaOf[T metav1.Object](objs []T) []metav1.Object {
	out := make([]metav1.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}
