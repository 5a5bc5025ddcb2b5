package rollout

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
)

// Deletions through the typed pod client (Reconciler.Pods, as Run wires it): each pod of the
// plan is deleted with its UID as precondition and remembered, a pod already gone or replaced
// is remembered too, and a deletion the API server refuses is returned and not remembered.
func TestDeletePodsThroughTheTypedClient(t *testing.T) {
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: name, UID: types.UID(name + "-uid")}}
	}
	for name, tc := range map[string]struct {
		refuse      error    // what the API server answers a deletion of agent-b, nil to delete it
		wantErr     bool     // deletePods returns an error
		wantLeft    []string // pods left on the API server
		wantDeleted []string // UIDs this process remembers deleting
	}{
		"every pod is deleted, and one already gone is remembered too": {
			wantLeft: []string{"agent-c"}, wantDeleted: []string{"agent-a-uid", "agent-b-uid", "agent-gone-uid"},
		},
		"a pod replaced since (a UID conflict) is remembered as deleted": {
			refuse:   apierrors.NewConflict(corev1.Resource("pods"), "agent-b", errors.New("uid precondition failed")),
			wantLeft: []string{"agent-b", "agent-c"}, wantDeleted: []string{"agent-a-uid", "agent-b-uid", "agent-gone-uid"},
		},
		"a deletion the API server refuses is returned and not remembered": {
			refuse:  apierrors.NewForbidden(corev1.Resource("pods"), "agent-b", errors.New("denied")),
			wantErr: true, wantLeft: []string{"agent-b", "agent-c"}, wantDeleted: []string{"agent-a-uid", "agent-gone-uid"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			cs := fake.NewClientset(pod("agent-a"), pod("agent-b"), pod("agent-c"))
			var preconditions []string
			cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
				d := a.(k8stesting.DeleteAction)
				if p := d.GetDeleteOptions().Preconditions; p != nil && p.UID != nil {
					preconditions = append(preconditions, string(*p.UID))
				}
				if d.GetName() == "agent-b" && tc.refuse != nil {
					return true, nil, tc.refuse
				}
				return false, nil, nil
			})
			r := &Reconciler{Pods: cs.CoreV1()}
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "agent"}}
			var refs []rolloutplan.PodRef
			for _, p := range []*corev1.Pod{pod("agent-a"), pod("agent-b"), pod("agent-gone")} {
				refs = append(refs, rolloutplan.PodRef{Name: p.Name, UID: string(p.UID), Node: "node-" + p.Name})
			}
			err := r.deletePods(context.Background(), logr.Discard(), ds, refs, t0)
			if (err != nil) != tc.wantErr {
				t.Fatalf("deletePods: %v, want an error: %v", err, tc.wantErr)
			}
			list, err := cs.CoreV1().Pods("platform").List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, p := range list.Items {
				left = append(left, p.Name)
			}
			slices.Sort(left)
			if !slices.Equal(left, tc.wantLeft) {
				t.Errorf("pods left %v, want %v", left, tc.wantLeft)
			}
			if got := slices.Sorted(maps.Keys(r.deleted)); !slices.Equal(got, uidsOf(tc.wantDeleted)) {
				t.Errorf("remembered as deleted %v, want %v", got, tc.wantDeleted)
			}
			slices.Sort(preconditions)
			if want := []string{"agent-a-uid", "agent-b-uid", "agent-gone-uid"}; !slices.Equal(preconditions, want) {
				t.Errorf("deletions with UID preconditions %v, want %v", preconditions, want)
			}
		})
	}
}

func uidsOf(s []string) []types.UID {
	out := make([]types.UID, len(s))
	for i, u := range s {
		out[i] = types.UID(u)
	}
	return out
}
