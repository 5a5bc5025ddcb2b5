package admission

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// A review whose policies cannot be evaluated is never admitted silently: every caller gets the
// failure mode's verdict from the core, denied by default, admitted with a warning naming the
// error in the warn mode.
func TestFailureModeDecidesAReviewThatCouldNotBeEvaluated(t *testing.T) {
	set, err := policy.Compile(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A deadline passed before the evaluation starts fails it, like an error in a policy.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := map[string]struct {
		mode         FailureMode
		wantAllowed  bool
		wantDenial   string // part of DenialMessage, when denied
		wantWarnings []string
	}{
		"deny": {mode: FailClosed, wantDenial: "daemonguard could not evaluate its policies (failure mode deny): "},
		"empty, as the CLI, the audit and the plan leave it": {
			mode: "", wantDenial: "daemonguard could not evaluate its policies (failure mode deny): ",
		},
		"warn": {
			mode: FailOpenWithWarning, wantAllowed: true,
			wantWarnings: []string{"daemonguard could not evaluate its policies and admitted this object unchecked: "},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := &Reviewer{FailureMode: tc.mode}
			r := a.Validate(ctx, set, Review{Operation: policy.OpCreate, Namespace: "default", Object: []byte(seedObject)})
			if !errors.Is(r.Failed, context.Canceled) {
				t.Fatalf("Failed = %v, want the evaluation error", r.Failed)
			}
			v := r.Verdict
			if v.Allowed != tc.wantAllowed || !errors.Is(v.Unevaluated, r.Failed) {
				t.Fatalf("verdict %+v, want allowed %v naming %v", v, tc.wantAllowed, r.Failed)
			}
			if !tc.wantAllowed && v.DenialMessage() != tc.wantDenial+r.Failed.Error() {
				t.Errorf("denial %q, want %q", v.DenialMessage(), tc.wantDenial+r.Failed.Error())
			}
			want := slices.Clone(tc.wantWarnings)
			for i := range want {
				want[i] += r.Failed.Error()
			}
			if got := v.WarningMessages(); len(got) != len(want) || !slices.Equal(got, want) {
				t.Errorf("warnings %q, want %q", got, want)
			}
		})
	}
}
