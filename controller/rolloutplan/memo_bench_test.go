package rolloutplan

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// BenchmarkReconcileState is the classification of one reconcile during a rollout on 5,000
// nodes: between two reconciles a few pods changed (here four readiness flips, each a new object
// with a new resourceVersion, as the cache holds them). StateOf classifies every node and pod;
// a Memo only the changed ones; Memo+Compute is the reconcile's whole decision, the plan made on
// the memo's state; the deleted=500 cases the same while this process remembers 500 pods it
// deleted (Observed.Deleted; a wave of 10% of the nodes), as it does for a minute after each
// wave, through most of a rollout. No cluster is needed:
//
//	go test -short -run '^$' -bench ReconcileState -benchmem ./controller/rolloutplan/
func BenchmarkReconcileState(b *testing.B) {
	// The changed pods are taken in turn from the first window, so that the pods not Ready, and
	// with them the plan's work, stay as many however many reconciles the benchmark runs.
	const nodes, changed, window = 5000, 4, 64
	const deletedPods = 500
	memoCompute := func(m *Memo, o Observed) RolloutState {
		st := m.StateOf(o)
		if plan := Compute(st); plan.Desired != len(st.Nodes) {
			panic(fmt.Sprintf("the plan covers %d nodes of %d", plan.Desired, len(st.Nodes)))
		}
		return st
	}
	for _, tc := range []struct {
		name    string
		stateOf func(*Memo, Observed) RolloutState
		// plan, when set instead of stateOf, plans as the controller does: on the memo's
		// Nodes, lent (Memo.Compute).
		plan    bool
		deleted int // pods of Observed.Deleted, taken past the window
	}{
		{name: "StateOf", stateOf: func(_ *Memo, o Observed) RolloutState { return StateOf(o) }},
		{name: "Memo", stateOf: func(m *Memo, o Observed) RolloutState { return m.StateOf(o) }},
		{name: fmt.Sprintf("Memo,deleted=%d", deletedPods), stateOf: func(m *Memo, o Observed) RolloutState { return m.StateOf(o) }, deleted: deletedPods},
		// The reconcile's whole decision: the memo's state, then the plan on it.
		{name: "Memo+Compute", stateOf: memoCompute},
		{name: fmt.Sprintf("Memo+Compute,deleted=%d", deletedPods), stateOf: memoCompute, deleted: deletedPods},
		// The same decision as the controller makes it: the plan on the memo's Nodes, lent.
		{name: "Memo.Compute", plan: true},
		{name: fmt.Sprintf("Memo.Compute,deleted=%d", deletedPods), plan: true, deleted: deletedPods},
	} {
		b.Run(fmt.Sprintf("nodes=%d/%s", nodes, tc.name), func(b *testing.B) {
			in := forecastInput(nodes, "")
			rv := 0
			for _, objs := range [][]metav1.Object{metaOf(in.Nodes), metaOf(in.Pods)} {
				for _, o := range objs {
					rv++
					o.SetResourceVersion(fmt.Sprint(rv))
				}
			}
			settings, err := rolloutapi.ParseSettings(in.DaemonSet.Annotations)
			if err != nil {
				b.Fatal(err)
			}
			o := Observed{Now: t0, DaemonSet: in.DaemonSet, Settings: settings, TargetRevision: newRev, Pods: in.Pods, Nodes: in.Nodes}
			if tc.deleted > 0 {
				o.Deleted = map[types.UID]time.Time{}
				for _, p := range in.Pods[window : window+tc.deleted] {
					o.Deleted[p.UID] = t0
				}
			}
			var m Memo
			covered := func() int {
				if tc.plan {
					return m.Compute(o).Desired
				}
				return len(tc.stateOf(&m, o).Nodes)
			}
			covered()
			for b.Loop() {
				for range changed {
					rv++
					i := rv % window
					p := o.Pods[i].DeepCopy()
					p.ResourceVersion = fmt.Sprint(rv)
					c := &p.Status.Conditions[0]
					c.Status = map[corev1.ConditionStatus]corev1.ConditionStatus{corev1.ConditionTrue: corev1.ConditionFalse, corev1.ConditionFalse: corev1.ConditionTrue}[c.Status]
					o.Pods[i] = p
				}
				if n := covered(); n != nodes {
					b.Fatalf("%d nodes, want %d", n, nodes)
				}
			}
		})
	}
}

func metaOf[T metav1.Object](objs []T) []metav1.Object {
	out := make([]metav1.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}
