package rollout

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
)

// The deletions a reconcile read (Facts.Deleted, shared with the reconciler without a copy) stay
// as they were read while the reconciler remembers new deletions and forgets settled ones, which
// the next read sees.
func TestDeletionsReadStayAsTheyWereRead(t *testing.T) {
	settledAt, recent := t0.Add(-2*time.Minute), t0.Add(-time.Second)
	r := &Reconciler{Pods: fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "agent-new", UID: "new-uid"}}).CoreV1(),
		deleted: map[types.UID]time.Time{"settled-uid": settledAt, "recent-uid": recent}}
	read := func() map[types.UID]time.Time {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.deleted // as gather reads it
	}
	held := read()
	want := maps.Clone(held)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "agent"}}
	if err := r.deletePods(context.Background(), logr.Discard(), ds, []rolloutplan.PodRef{{Name: "agent-new", UID: "new-uid", Node: "n1"}}, t0); err != nil {
		t.Fatal(err)
	}
	r.forgetSettled(t0)
	if !maps.Equal(held, want) {
		t.Errorf("the deletions read changed under the reconcile that read them: %v, want %v", held, want)
	}
	if got, wantNow := read(), map[types.UID]time.Time{"recent-uid": recent, "new-uid": t0}; !maps.Equal(got, wantNow) {
		t.Errorf("the next read has %v, want %v", got, wantNow)
	}
	r.forgetSettled(t0.Add(time.Hour))
	if got := read(); len(got) != 0 {
		t.Errorf("after an hour the reconciler still remembers %v", got)
	}
	if !maps.Equal(held, want) {
		t.Errorf("the deletions read changed when every deletion settled: %v, want %v", held, want)
	}
}
