package rolloutapi

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestParseSteps(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    []Step
		wantErr string
	}{
		"empty is one 100% step": {in: " ", want: []Step{{Kind: StepPercent, Value: 100, Text: "100%"}}},
		"every kind, spaces trimmed": {in: "1, pause:5m ,25%,pause,100%", want: []Step{
			{Kind: StepNodes, Value: 1, Text: "1"}, {Kind: StepTimedPause, Duration: 5 * time.Minute, Text: "pause:5m"},
			{Kind: StepPercent, Value: 25, Text: "25%"}, {Kind: StepPause, Text: "pause"}, {Kind: StepPercent, Value: 100, Text: "100%"},
		}},
		"a pause after the last 100%": {in: "100%,pause", want: []Step{{Kind: StepPercent, Value: 100, Text: "100%"}, {Kind: StepPause, Text: "pause"}}},
		"not ending at 100%":          {in: "1,50%", wantErr: "must be 100%"},
		"only pauses":                 {in: "pause", wantErr: "update no node"},
		"a zero count":                {in: "0,100%", wantErr: "node count"},
		"a percent above 100":         {in: "101%", wantErr: "1% to 100%"},
		"a pause without a duration":  {in: "pause:,100%", wantErr: "positive Go duration"},
		"a negative pause":            {in: "pause:-5m,100%", wantErr: "positive Go duration"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseSteps(tc.in)
			if expectError(t, err, tc.wantErr) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ParseSteps = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("step %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestStepTarget(t *testing.T) {
	tests := map[string]struct {
		step    Step
		desired int
		want    int
	}{
		"a count caps at desired":   {step: Step{Kind: StepNodes, Value: 5}, desired: 3, want: 3},
		"a percent rounds up":       {step: Step{Kind: StepPercent, Value: 25}, desired: 5, want: 2},
		"100% is every node":        {step: Step{Kind: StepPercent, Value: 100}, desired: 7, want: 7},
		"a pause asks for no nodes": {step: Step{Kind: StepPause}, desired: 7, want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.step.Target(tc.desired); got != tc.want {
				t.Errorf("Target(%d) = %d, want %d", tc.desired, got, tc.want)
			}
		})
	}
}

func TestParseSettings(t *testing.T) {
	tests := map[string]struct {
		annotations map[string]string
		wantErr     string
		check       func(Settings) bool
	}{
		"defaults": {annotations: map[string]string{}, check: func(s Settings) bool {
			return s.MaxUnavailable == intstr.FromInt32(1) && len(s.Steps) == 1 && s.ProgressDeadline == DefaultProgressDeadline && s.Bake == 0
		}},
		"a bake":                  {annotations: map[string]string{AnnotationBake: "1h30m"}, check: func(s Settings) bool { return s.Bake == 90*time.Minute }},
		"the longest bake":        {annotations: map[string]string{AnnotationBake: "24h"}, check: func(s Settings) bool { return s.Bake == MaxBake }},
		"a bake over 24h":         {annotations: map[string]string{AnnotationBake: "24h0m1s"}, wantErr: `daemonguard.io/bake "24h0m1s": must be a Go duration above 0s and at most 24h`},
		"a zero bake":             {annotations: map[string]string{AnnotationBake: "0s"}, wantErr: "above 0s"},
		"a negative bake":         {annotations: map[string]string{AnnotationBake: "-5m"}, wantErr: "above 0s"},
		"a bake in days":          {annotations: map[string]string{AnnotationBake: "1d"}, wantErr: AnnotationBake},
		"an empty bake":           {annotations: map[string]string{AnnotationBake: ""}, wantErr: AnnotationBake},
		"percent budget":          {annotations: map[string]string{AnnotationMaxUnavailable: "10%"}, check: func(s Settings) bool { return ResolveMaxUnavailable(s.MaxUnavailable, 1000) == 100 }},
		"steps":                   {annotations: map[string]string{AnnotationSteps: "1, pause:5m ,25%,pause,100%"}, check: func(s Settings) bool { return len(s.Steps) == 5 && s.Steps[1].Duration == 5*time.Minute }},
		"zero budget":             {annotations: map[string]string{AnnotationMaxUnavailable: "0"}, wantErr: "at least 1"},
		"steps not ending at 100": {annotations: map[string]string{AnnotationSteps: "1,50%"}, wantErr: "must be 100%"},
		"bad deadline":            {annotations: map[string]string{AnnotationProgressDeadline: "soon"}, wantErr: "duration"},
		"garbage percent":         {annotations: map[string]string{AnnotationMaxUnavailable: "x%"}, wantErr: "percent"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s, err := ParseSettings(tc.annotations)
			if expectError(t, err, tc.wantErr) {
				return
			}
			if err != nil || !tc.check(s) {
				t.Errorf("settings %+v, err %v", s, err)
			}
		})
	}
}

// expectError reports whether the case expects an error, want being a part of it, and fails t
// when err does not contain it.
func expectError(t *testing.T, err error, want string) bool {
	t.Helper()
	if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Fatalf("err = %v, want %q", err, want)
	}
	return want != ""
}
