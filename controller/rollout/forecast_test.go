package rollout

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// TestForecastSkipsNoReplanThatMatters holds ForecastRollout's shortcut to what it assumes of the
// planner: after a write, planning again at the same moment on replacements not yet Ready deletes
// nothing more and moves no step, so skipping that run leaves the forecast as it was.
func TestForecastSkipsNoReplanThatMatters(t *testing.T) {
	tests := map[string]struct {
		budget string
		change func(*ForecastInput) // on top of forecastInput's ready nodes, one old pod each
	}{
		"one node at a time": {},
		"10% at a time":      {budget: "10%"},
		"one zone at a time": {budget: "7", change: func(in *ForecastInput) {
			in.DaemonSet.Annotations[rolloutapi.AnnotationTopologyKey] = "topology.kubernetes.io/zone"
		}},
		"minReadySeconds, manual pauses, control-plane and unready nodes, pods missing, terminating, new, unready": {
			budget: "3",
			change: func(in *ForecastInput) {
				in.DaemonSet.Spec.MinReadySeconds = 5
				in.DaemonSet.Annotations[rolloutapi.AnnotationSteps] = "1,pause,50%,pause:1m,100%"
				in.Nodes[3].Labels["node-role.kubernetes.io/control-plane"] = ""
				in.Nodes[7].Labels["node-role.kubernetes.io/control-plane"] = ""
				in.Nodes[9].Status.Conditions[0].Status = corev1.ConditionFalse
				in.Pods = in.Pods[:150]
				deleted := metav1.NewTime(t0.Add(-time.Second))
				in.Pods[5].DeletionTimestamp = &deleted
				in.Pods[6].Labels[revisionLabel] = forecastRevision
				in.Pods[8].Status.Conditions[0].Status = corev1.ConditionFalse
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			in := forecastInput(200, tt.budget)
			if tt.change != nil {
				tt.change(&in)
			}
			got, err := forecast(in, false)
			if err != nil {
				t.Fatal(err)
			}
			want, err := forecast(in, true)
			if err != nil {
				t.Fatal(err)
			}
			if !want.Complete || len(want.Waves) == 0 {
				t.Fatalf("the forecast does not test much: %d waves, %s", len(want.Waves), want.Outcome)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("forecast without the second run differs:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}
