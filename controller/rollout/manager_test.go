package rollout

import (
	"context"
	"reflect"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Both stores, the informers' index and the cache reader of a namespaced cache, return the same
// pods: those of the namespace whose controller has the UID, and every node.
func TestStoresReturnTheDaemonSetsPodsAndEveryNode(t *testing.T) {
	owned := func(ns, name string, uid types.UID, controller bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: uid, Controller: ptr.To(controller)},
		}}}
	}
	objs := []client.Object{
		owned("a", "mine-1", "ds-uid", true),
		owned("a", "mine-2", "ds-uid", true),
		owned("a", "other", "other-uid", true),
		owned("a", "not-controller", "ds-uid", false),
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "orphan"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
	}
	indexed := indexedStore()
	for _, o := range objs {
		target := indexed.pods
		if _, ok := o.(*corev1.Node); ok {
			target = indexed.nodes
		}
		if err := target.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	stores := map[string]Store{
		"informer index": indexed,
		"cache reader":   readerStore{fake.NewClientBuilder().WithObjects(objs...).Build()},
	}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			pods, err := s.PodsOf(ctx, "a", "ds-uid")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pods {
				got = append(got, p.Name)
			}
			slices.Sort(got)
			if want := []string{"mine-1", "mine-2"}; !slices.Equal(got, want) {
				t.Errorf("PodsOf = %v, want %v", got, want)
			}
			nodes, err := s.Nodes(ctx)
			if err != nil || len(nodes) != 2 {
				t.Errorf("Nodes = %d nodes, %v; want 2", len(nodes), err)
			}
		})
	}
}

// A pod or ControllerRevision event reconciles the DaemonSet that controls it, and nothing else.
func TestEventsReconcileTheControllingDaemonSet(t *testing.T) {
	for name, tc := range map[string]struct {
		refs []metav1.OwnerReference // the object's owner references
		want []reconcile.Request
	}{
		"a DaemonSet's pod reconciles it, in the pod's namespace": {
			refs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "u", Controller: ptr.To(true)}},
			want: []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "platform", Name: "agent"}}},
		},
		"another version of apps reads the same DaemonSet": {
			refs: []metav1.OwnerReference{{APIVersion: "apps/v1beta2", Kind: "DaemonSet", Name: "agent", UID: "u", Controller: ptr.To(true)}},
			want: []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: "platform", Name: "agent"}}},
		},
		"a DaemonSet that owns without controlling is not reconciled": {
			refs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "u"}},
		},
		"a ReplicaSet's pod reconciles nothing": {
			refs: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "u", Controller: ptr.To(true)}},
		},
		"a DaemonSet kind of another group reconciles nothing": {
			refs: []metav1.OwnerReference{{APIVersion: "example.com/v1", Kind: "DaemonSet", Name: "agent", UID: "u", Controller: ptr.To(true)}},
		},
		"a malformed apiVersion reconciles nothing": {
			refs: []metav1.OwnerReference{{APIVersion: "apps/v1/x", Kind: "DaemonSet", Name: "agent", UID: "u", Controller: ptr.To(true)}},
		},
		"an orphan reconciles nothing": {},
	} {
		t.Run(name, func(t *testing.T) {
			for _, obj := range []client.Object{
				&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "agent-x", OwnerReferences: tc.refs}},
				&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "agent-1", OwnerReferences: tc.refs}},
			} {
				if got := controllingDaemonSet(context.Background(), obj); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%T: reconciles %v, want %v", obj, got, tc.want)
				}
				// Marking what changed for a followed DaemonSet (follow.go) reconciles the same.
				if got := newChanges(0).podsOf(controllingDaemonSet)(context.Background(), obj); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%T, following: reconciles %v, want %v", obj, got, tc.want)
				}
			}
		})
	}
}
