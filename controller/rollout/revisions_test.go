package rollout

import (
	"context"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// A reconcile reads the revisions its DaemonSet controls, and no other, whether the cache indexes
// them by controller (as Run registers it) or lists the namespace: another DaemonSet's revisions,
// one that only owns a revision without controlling it, and a revision of another namespace are
// left out.
func TestRevisionsAreTheDaemonSetsWithOrWithoutTheIndex(t *testing.T) {
	const uid = "ds-uid"
	ds := managedAgent(uid, "agent:2")
	other := revision(t, "other-uid", "other", 7, "agent:9")
	other.Name = "other-rev"
	owned := revision(t, uid, "owned", 3, "agent:3")
	owned.Name, owned.OwnerReferences[0].Controller = "owned-rev", nil
	elsewhere := revision(t, uid, "elsewhere", 4, "agent:4")
	elsewhere.Namespace = "other-ns"
	objs := []client.Object{ds, revision(t, uid, oldRev, 1, "agent:1"), revision(t, uid, newRev, 2, "agent:2"), other, owned, elsewhere}
	for name, tc := range map[string]struct {
		indexed bool // the client's cache indexes revisions by controller, and the reconciler says so
	}{
		"listed by the index of controllers": {indexed: true},
		"listed from the namespace":          {indexed: false},
	} {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...)
			if tc.indexed {
				b = b.WithIndex(&appsv1.ControllerRevision{}, revisionControllerIndex, func(o client.Object) []string { return controllerUIDs(o) })
			}
			r := &Reconciler{Client: b.Build(), RevisionsIndexed: tc.indexed}
			revs, err := r.revisions(context.Background(), ds)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, cr := range revs {
				if !metav1.IsControlledBy(cr, ds) {
					t.Errorf("revision %s is not the DaemonSet's", cr.Name)
				}
				got = append(got, cr.Name)
			}
			slices.Sort(got)
			if want := []string{"agent-new", "agent-old"}; !slices.Equal(got, want) {
				t.Fatalf("revisions %v, want %v", got, want)
			}
		})
	}
}
