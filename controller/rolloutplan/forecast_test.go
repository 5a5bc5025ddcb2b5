package rolloutplan

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// TestForecastSkipsNoReplanThatMatters holds Forecast's shortcut to what it assumes of the
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
			got, err := forecast(in, forecastSeams{checkState: true})
			if err != nil {
				t.Fatal(err)
			}
			want, err := forecast(in, forecastSeams{replanAlways: true, checkState: true})
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

// forecastCluster is n ready workers, each running a ready pod of revision "old".
func forecastCluster(n int, annotations map[string]string) ForecastInput {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent", Annotations: annotations}}
	in := ForecastInput{DaemonSet: ds, ReadyAfter: 30 * time.Second, Now: now}
	for i := range n {
		name := fmt.Sprintf("worker-%02d", i)
		in.Nodes = append(in.Nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
		in.Pods = append(in.Pods, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "agent-" + name, UID: types.UID("uid-" + name), Labels: map[string]string{revisionLabel: "old"}},
			Spec:       corev1.PodSpec{NodeName: name},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}},
		})
	}
	return in
}

func TestForecastRollout(t *testing.T) {
	cases := []struct {
		name        string
		annotations map[string]string
		waves       []int // nodes per wave
		duration    time.Duration
		complete    bool
		outcome     string
	}{
		{name: "one node at a time", annotations: map[string]string{}, waves: []int{1, 1, 1, 1}, duration: 4 * 30 * time.Second, complete: true},
		{
			name:        "budget and steps",
			annotations: map[string]string{rolloutapi.AnnotationMaxUnavailable: "2", rolloutapi.AnnotationSteps: "1,pause,100%"},
			waves:       []int{1, 2, 1}, duration: 3 * 30 * time.Second, complete: true,
		},
		{
			name: "each wave waits for its gates: ready at 30s, then two measurements 20s apart",
			annotations: map[string]string{rolloutapi.AnnotationMaxUnavailable: "2",
				rolloutapi.AnnotationAnalysis: `- {name: errors, query: 'x{node=~"{{ nodes }}"}', max: 0.1, interval: 20s, count: 2}`},
			waves: []int{2, 2}, duration: 2 * (30 + 2*20) * time.Second, complete: true,
		},
		{
			name:        "a bake adds its length after the last wave is ready",
			annotations: map[string]string{rolloutapi.AnnotationMaxUnavailable: "4", rolloutapi.AnnotationBake: "10m"},
			waves:       []int{4}, duration: 30*time.Second + 10*time.Minute, complete: true, outcome: "baked 10m0s since 2026-11-25T12:00:30Z",
		},
		{
			name:        "the paused annotation stops it before any deletion",
			annotations: map[string]string{rolloutapi.AnnotationPaused: "true"},
			waves:       []int{}, outcome: "paused by",
		},
		{
			name:        "pods slower than the progress deadline halt it",
			annotations: map[string]string{rolloutapi.AnnotationProgressDeadline: "20s"},
			waves:       []int{1}, duration: 20 * time.Second, outcome: "not Ready within the progress deadline of 20s",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Forecast(forecastCluster(4, tc.annotations))
			if err != nil {
				t.Fatal(err)
			}
			var sizes []int
			seen := map[string]bool{}
			for _, w := range f.Waves {
				sizes = append(sizes, len(w.Nodes))
				for _, n := range w.Nodes {
					if seen[n] {
						t.Fatalf("node %s replaced twice: %+v", n, f.Waves)
					}
					seen[n] = true
				}
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.waves) && !(len(sizes) == 0 && len(tc.waves) == 0) {
				t.Errorf("wave sizes = %v, want %v", sizes, tc.waves)
			}
			if f.Complete != tc.complete || (tc.duration != 0 && f.Duration != tc.duration) {
				t.Errorf("complete %v after %v, want %v after %v (%s)", f.Complete, f.Duration, tc.complete, tc.duration, f.Outcome)
			}
			if !strings.Contains(f.Outcome, tc.outcome) {
				t.Errorf("outcome %q does not contain %q", f.Outcome, tc.outcome)
			}
		})
	}
}

func TestForecastRejectsInvalidSettings(t *testing.T) {
	if _, err := Forecast(forecastCluster(2, map[string]string{rolloutapi.AnnotationSteps: "50%"})); err == nil {
		t.Fatal("steps that never reach 100% must be an error")
	}
}
