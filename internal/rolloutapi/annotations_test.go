package rolloutapi_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Each limited annotation takes a value of exactly its limit and refuses one byte more, naming
// the key, the size and the limit; keys daemonguard does not read have no limit.
func TestCheckAnnotationSize(t *testing.T) {
	tests := map[string]struct {
		key     string // annotation key
		size    int    // bytes of the value
		wantErr string // substring of the error; "" for none
	}{
		"steps at its limit":                 {key: rolloutapi.AnnotationSteps, size: 1024},
		"steps one byte past its limit":      {key: rolloutapi.AnnotationSteps, size: 1025, wantErr: "annotation daemonguard.io/steps is 1025 bytes, over its limit of 1024 bytes"},
		"analysis at its limit":              {key: rolloutapi.AnnotationAnalysis, size: 16 << 10},
		"analysis past its limit":            {key: rolloutapi.AnnotationAnalysis, size: 256 << 10, wantErr: "daemonguard.io/analysis is 262144 bytes, over its limit of 16384 bytes"},
		"an enum-like value past 256 bytes":  {key: rolloutapi.AnnotationPaused, size: 257, wantErr: "over its limit of 256 bytes"},
		"a topology key of 317 bytes":        {key: rolloutapi.AnnotationTopologyKey, size: 317},
		"a status annotation past its limit": {key: rolloutapi.StatusAnalysis, size: 33 << 10, wantErr: "status.daemonguard.io/analysis is 33792 bytes"},
		"a key daemonguard does not read":    {key: "example.com/notes", size: 1 << 20},
		"an unknown daemonguard.io/ key":     {key: "daemonguard.io/unknown", size: 1 << 20},
		"an empty value of a limited key":    {key: rolloutapi.AnnotationResume, size: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := rolloutapi.CheckAnnotationSize(tc.key, strings.Repeat(",", tc.size))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var tooLarge *rolloutapi.AnnotationTooLargeError
			if !errors.As(err, &tooLarge) || tooLarge.Key != tc.key || tooLarge.Size != tc.size || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v; want an AnnotationTooLargeError for %s of %d bytes containing %q", err, tc.key, tc.size, tc.wantErr)
			}
		})
	}
}

// The table covers every annotation the rollout_annotations policy knows and every status
// annotation the controller writes, and no valid value comes near its limit.
func TestAnnotationLimitsCoverEveryKeyDaemonguardReads(t *testing.T) {
	q := builtinQuery(t, "data.daemonguard.policies.rollout_annotations.known")
	rs, err := q.Eval(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("known: %v %v", rs, err)
	}
	known, _ := rs[0].Expressions[0].Value.(map[string]any)
	if len(known) == 0 {
		t.Fatal("the policy knows no annotation")
	}
	limited := rolloutapi.LimitedAnnotations()
	for k := range known {
		if !slices.Contains(limited, k) {
			t.Errorf("%s: the policy knows it, the size table does not", k)
		}
	}
	for _, k := range []string{rolloutapi.StatusRevision, rolloutapi.StatusStep, rolloutapi.StatusStepStarted, rolloutapi.StatusPauseToken,
		rolloutapi.StatusUpdated, rolloutapi.StatusNextNodes, rolloutapi.StatusProgress, rolloutapi.StatusFailedRevision, rolloutapi.StatusAnalysis} {
		if _, ok := rolloutapi.AnnotationLimit(k); !ok {
			t.Errorf("%s: the controller writes it, the size table has no limit", k)
		}
	}

	// The largest values a person writes fit with room to spare.
	var percents []string
	for p := 1; p <= 100; p++ {
		percents = append(percents, fmt.Sprintf("%d%%", p), "pause:8760h")
	}
	steps := strings.Join(percents[:len(percents)-1], ",")
	if err := rolloutapi.CheckAnnotationSize(rolloutapi.AnnotationSteps, steps[:min(len(steps), 1024)]); err != nil {
		t.Error(err)
	}
	if _, err := rolloutapi.ParseSteps(strings.Join(percents[:150], ",") + ",100%"); err == nil {
		t.Error("150 steps with pauses (about 1.2 KiB) parsed; want the size limit")
	}
	gate := fmt.Sprintf("- name: g%%d\n  query: %s\n  max: 0.01\n  interval: 30s\n  count: 3\n  nodeLabel: instance\n  baseline: true\n",
		`sum by (node) (rate(errors_total{node=~"{{ nodes }}", pod=~"agent-.*"}[5m])) / sum by (node) (rate(requests_total{node=~"{{ nodes }}"}[5m]))`+strings.Repeat(" ", 900))
	var analysis strings.Builder
	for i := range rolloutapi.MaxGates {
		fmt.Fprintf(&analysis, gate, i)
	}
	if gates, err := rolloutapi.ParseGates(analysis.String()); err != nil || len(gates) != rolloutapi.MaxGates {
		t.Errorf("%d gates with 1 KiB queries (%d bytes): %d gates, %v; want them read", rolloutapi.MaxGates, analysis.Len(), len(gates), err)
	}
}

// rollout_annotations' max_gates is rolloutapi.MaxGates.
func TestMaxGatesMatchesThePolicy(t *testing.T) {
	rs, err := builtinQuery(t, "data.daemonguard.policies.rollout_annotations.max_gates").Eval(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("max_gates: %v %v", rs, err)
	}
	if got := fmt.Sprint(rs[0].Expressions[0].Value); got != fmt.Sprint(rolloutapi.MaxGates) {
		t.Errorf("rollout_annotations.max_gates is %s, rolloutapi.MaxGates %d", got, rolloutapi.MaxGates)
	}
}

// The controller's parsers refuse a value past its limit before reading it, with the same error.
func TestParsersRefuseOversizedValues(t *testing.T) {
	huge := strings.Repeat(",", 256<<10)
	oneGate := "- name: g%d\n  query: up{node=~\"{{ nodes }}\"}\n  max: 1\n"
	var eleven strings.Builder
	for i := range rolloutapi.MaxGates + 1 {
		fmt.Fprintf(&eleven, oneGate, i)
	}
	tests := map[string]struct {
		parse   func() error
		wantErr string
	}{
		"ParseSettings refuses huge steps": {
			parse: func() error {
				_, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationSteps: huge})
				return err
			},
			wantErr: "annotation daemonguard.io/steps is 262144 bytes, over its limit of 1024 bytes",
		},
		"ParseSettings refuses a huge resume token": {
			parse: func() error {
				_, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationResume: huge})
				return err
			},
			wantErr: "annotation daemonguard.io/resume is 262144 bytes",
		},
		"ParseSettings ignores the status annotations": {
			parse: func() error {
				_, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.StatusAnalysis: huge})
				return err
			},
		},
		"ParseSteps refuses huge steps": {
			parse:   func() error { _, err := rolloutapi.ParseSteps(huge); return err },
			wantErr: "over its limit of 1024 bytes",
		},
		"ParseGates refuses a huge analysis": {
			parse:   func() error { _, err := rolloutapi.ParseGates(huge); return err },
			wantErr: "annotation daemonguard.io/analysis is 262144 bytes, over its limit of 16384 bytes",
		},
		"ParseGates refuses more than MaxGates gates": {
			parse:   func() error { _, err := rolloutapi.ParseGates(eleven.String()); return err },
			wantErr: "11 gates: at most 10 gates are allowed per DaemonSet",
		},
		"DecodeStatus refuses a huge analysis status and reads the rest": {
			parse: func() error {
				s, err := rolloutapi.DecodeStatus(map[string]string{rolloutapi.StatusAnalysis: huge, rolloutapi.StatusRevision: "abc"})
				if s.Revision != "abc" || s.Analysis != nil {
					return fmt.Errorf("status %+v: want the revision read and no analysis", s)
				}
				return err
			},
			wantErr: "annotation status.daemonguard.io/analysis is 262144 bytes, over its limit of 32768 bytes",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := tc.parse()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v; want one containing %q", err, tc.wantErr)
			case tc.wantErr != "" && len(err.Error()) > 512:
				t.Fatalf("error of %d bytes; want the value left out of it", len(err.Error()))
			}
		})
	}
}
