package preflight

import (
	"reflect"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
)

func TestForecastLinesListsPausesInTheOrderTheyHappen(t *testing.T) {
	tests := map[string]struct {
		forecast rolloutplan.Timeline
		want     []string
	}{
		"a timed pause reached as soon as the canary is Ready follows the canary": {
			forecast: rolloutplan.Timeline{
				Waves: []rolloutplan.Wave{
					{At: 0, Step: "1/4: 1", StepIndex: 0, Nodes: []string{"worker-0"}},
					{At: 5 * time.Minute, Step: "3/4: 50%", StepIndex: 2, Nodes: []string{"worker-1"}},
				},
				Pauses: []rolloutplan.PauseStep{{At: 0, Step: "2/4: pause:5m", StepIndex: 1, Duration: 5 * time.Minute}},
			},
			want: []string{
				"  at 0s, step 1/4: 1: worker-0",
				"  at 0s, step 2/4: pause:5m: pauses 5m0s",
				"  at 5m0s, step 3/4: 50%: worker-1",
			},
		},
		"a manual pause resumed at once precedes the wave of the next step": {
			forecast: rolloutplan.Timeline{
				Waves:  []rolloutplan.Wave{{At: 0, Step: "2/2: 100%", StepIndex: 1, Nodes: []string{"worker-0"}}},
				Pauses: []rolloutplan.PauseStep{{At: 0, Step: "1/2: pause", StepIndex: 0, Manual: true}},
			},
			want: []string{
				"  at 0s, step 1/2: pause: waits for `daemonguard rollout resume` (counted as no time)",
				"  at 0s, step 2/2: 100%: worker-0",
			},
		},
		"a pause after the last wave comes last": {
			forecast: rolloutplan.Timeline{
				Waves:  []rolloutplan.Wave{{At: 0, Step: "1/2: 1", StepIndex: 0, Nodes: []string{"worker-0"}}},
				Pauses: []rolloutplan.PauseStep{{At: time.Minute, Step: "2/2: pause", StepIndex: 1, Manual: true}},
			},
			want: []string{
				"  at 0s, step 1/2: 1: worker-0",
				"  at 1m0s, step 2/2: pause: waits for `daemonguard rollout resume` (counted as no time)",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := forecastLines(&tc.forecast); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("forecastLines =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestGateLinesListEveryGateWithItsCadence(t *testing.T) {
	got := gateLines([]rolloutplan.GateSummary{
		{Name: "errors", Query: `sum by (node) (x{node=~"{{ nodes }}"})`, Interval: 30 * time.Second, Count: 3},
		{Name: "drops", Query: `y{node=~"{{ nodes }}"}`, Interval: time.Minute, Count: 1, Baseline: true},
	})
	want := []string{
		"analysis after each wave (the estimate assumes every measurement passes):",
		`  gate errors: 3 measurements 30s apart: sum by (node) (x{node=~"{{ nodes }}"})`,
		`  gate drops: 1 measurements 1m0s apart, against a baseline of other nodes: y{node=~"{{ nodes }}"}`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("gateLines =\n%q\nwant\n%q", got, want)
	}
	if lines := gateLines(nil); lines != nil {
		t.Errorf("no gates listed as %q", lines)
	}
}
