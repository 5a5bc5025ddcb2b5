package rolloutplan

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// BenchmarkForecastRollout is the forecast of `daemonguard rollout plan` for a managed DaemonSet
// on 1,000 and 5,000 ready nodes, steps "1,10%,pause:5m,100%": with the default budget of one
// node the planner runs about twice per node, with 10% about twice per wave. No cluster is needed:
//
//	go test -short -run '^$' -bench Forecast -benchmem ./controller/rolloutplan/
func BenchmarkForecastRollout(b *testing.B) {
	for _, tc := range []struct {
		name   string
		nodes  int
		budget string
	}{
		{"budget=1", 1000, ""},
		{"budget=10%", 1000, "10%"},
		{"nodes=5000/budget=1", 5000, ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			in := forecastInput(tc.nodes, tc.budget)
			for b.Loop() {
				f, err := Forecast(in)
				if err != nil {
					b.Fatal(err)
				}
				if !f.Complete {
					b.Fatalf("forecast did not complete: %s", f.Outcome)
				}
			}
		})
	}
}

// forecastInput is a managed DaemonSet with one ready pod of the old revision on each of n nodes
// over three zones; budget "" leaves the default maxUnavailable.
func forecastInput(n int, budget string) ForecastInput {
	annotations := map[string]string{rolloutapi.AnnotationRollout: "managed", rolloutapi.AnnotationSteps: "1,10%,pause:5m,100%"}
	if budget != "" {
		annotations[rolloutapi.AnnotationMaxUnavailable] = budget
	}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", Annotations: annotations},
		Spec: appsv1.DaemonSetSpec{
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template:       corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:2"}}}},
		},
	}
	in := ForecastInput{DaemonSet: ds, ReadyAfter: 2 * time.Second, Now: t0}
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		in.Nodes = append(in.Nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"topology.kubernetes.io/zone": fmt.Sprintf("zone-%d", i%3)}},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
		in.Pods = append(in.Pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "agent-" + name, UID: types.UID("agent-" + name), Labels: map[string]string{revisionLabel: oldRev},
				CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
			Spec: corev1.PodSpec{NodeName: name},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour + 2*time.Second))}}},
		})
	}
	return in
}
