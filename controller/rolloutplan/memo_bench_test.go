package rolloutplan

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// BenchmarkReconcileState is the classification of one reconcile during a rollout on 5,000
// nodes: between two reconciles a few pods changed (here four readiness flips, each a new object
// with a new resourceVersion, as the cache holds them). StateOf classifies every node and pod;
// a Memo only the changed ones; Memo+Compute is the reconcile's whole decision, the plan made on
// the memo's state. No cluster is needed:
//
//	go test -short -run '^$' -bench ReconcileState -benchmem ./controller/rolloutplan/
func BenchmarkReconcileState(b *testing.B) {
	// The changed pods are taken in turn from the first window, so that the pods not Ready, and
	// with them the plan's work, stay as many however many reconciles the benchmark runs.
	const nodes, changed, window = 5000, 4, 64
	for _, tc := range []struct {
		name    string
		stateOf func(*Memo, Observed) RolloutState
	}{
		{"StateOf", func(_ *Memo, o Observed) RolloutState { return StateOf(o) }},
		{"Memo", func(m *Memo, o Observed) RolloutState { return m.StateOf(o) }},
		// The reconcile's whole decision: the memo's state, then the plan on it.
		{"Memo+Compute", func(m *Memo, o Observed) RolloutState {
			st := m.StateOf(o)
			if plan := Compute(st); plan.Desired != len(st.Nodes) {
				panic(fmt.Sprintf("the plan covers %d nodes of %d", plan.Desired, len(st.Nodes)))
			}
			return st
		}},
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
			var m Memo
			tc.stateOf(&m, o)
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
				if st := tc.stateOf(&m, o); len(st.Nodes) != nodes {
					b.Fatalf("%d nodes, want %d", len(st.Nodes), nodes)
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
