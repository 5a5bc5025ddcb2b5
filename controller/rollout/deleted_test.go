package rollout

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
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

// The reconciler forgets a deletion within twice deletionSettles of it, never before
// deletionSettles, and sets a new map of deletions to forget some (never none) at most once per
// deletionSettles: over random deletions and reconciles a few seconds apart, as a rollout makes
// them.
func TestSettledDeletionsAreForgottenInBatches(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, seed))
		r := &Reconciler{}
		now, lastPrune, n := t0, time.Time{}, 0
		for step := range 400 {
			now = now.Add(time.Duration(1+rng.IntN(5000)) * time.Millisecond)
			if rng.IntN(3) == 0 {
				n++
				r.remember([]rolloutplan.PodRef{{Name: fmt.Sprint(n), UID: fmt.Sprint(n)}}, []bool{true}, now)
			}
			gen, before := r.deletedGen, len(r.deleted)
			r.forgetSettled(now)
			if r.deletedGen != gen && len(r.deleted) == before {
				t.Fatalf("seed %d, step %d: a new map of deletions that forgot none", seed, step)
			}
			if r.deletedGen != gen {
				if !lastPrune.IsZero() && now.Sub(lastPrune) < deletionSettles {
					t.Fatalf("seed %d, step %d: forgot deletions %v after the last time, within %v", seed, step, now.Sub(lastPrune), deletionSettles)
				}
				lastPrune = now
			}
			for uid, at := range r.deleted {
				if age := now.Sub(at); age >= 2*deletionSettles {
					t.Fatalf("seed %d, step %d: remembers %s deleted %v ago", seed, step, uid, age)
				}
			}
			if r.deletedGen != gen {
				for uid, at := range r.deleted {
					if now.Sub(at) > deletionSettles {
						t.Fatalf("seed %d, step %d: a new map still holds %s, settled", seed, step, uid)
					}
				}
			}
		}
		if lastPrune.IsZero() {
			t.Fatalf("seed %d: nothing was ever forgotten", seed)
		}
	}
}

// A deletion is remembered for deletionSettles at least, whatever the others.
func TestADeletionIsRememberedUntilItSettles(t *testing.T) {
	r := &Reconciler{}
	r.remember([]rolloutplan.PodRef{{Name: "old", UID: "old"}}, []bool{true}, t0)
	r.remember([]rolloutplan.PodRef{{Name: "new", UID: "new"}}, []bool{true}, t0.Add(2*deletionSettles-time.Second))
	r.forgetSettled(t0.Add(2 * deletionSettles))
	if _, ok := r.deleted["new"]; !ok {
		t.Fatal("a deletion a second old was forgotten with a settled one")
	}
	if _, ok := r.deleted["old"]; ok {
		t.Fatal("a deletion twice deletionSettles old is remembered")
	}
}
