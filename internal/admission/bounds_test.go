package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// builtinSet is the built-in policy set with its default parameters, as the webhook serves it.
func builtinSet(t testing.TB) *policy.Set {
	t.Helper()
	set, err := policy.CompileBuiltin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// annotatedDaemonSet is gatedDaemonSet's DaemonSet with these annotations instead and, when
// padding > 0, an unread annotation of padding bytes that makes the object that large.
func annotatedDaemonSet(t *testing.T, annotations map[string]any, padding int) []byte {
	t.Helper()
	if padding > 0 {
		annotations["example.com/padding"] = strings.Repeat("x", padding)
	}
	var ds map[string]any
	if err := json.Unmarshal(gatedDaemonSet(t, ""), &ds); err != nil {
		t.Fatal(err)
	}
	ds["metadata"].(map[string]any)["annotations"] = annotations
	raw, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// The worst case a tenant can write: 256 KiB of commas in daemonguard.io/steps (the API server's
// limit for all annotations together) in a 1.5 MiB object (etcd's). Every caller of the core gets
// one denial naming the annotation, its size and its limit, and no policy is evaluated: the whole
// review allocates a small multiple of the object (decoding it), where the evaluation the
// built-in policies would do grows with the value.
func TestAnOversizedAnnotationIsDeniedUnevaluated(t *testing.T) {
	set := builtinSet(t)
	raw := annotatedDaemonSet(t, map[string]any{rolloutapi.AnnotationSteps: strings.Repeat(",", 256<<10), rolloutapi.AnnotationRollout: "managed"}, 1300<<10)
	if len(raw) < 1500<<10 {
		t.Fatalf("object of %d bytes; want 1.5 MiB", len(raw))
	}
	core := &Reviewer{}
	rv := Review{Operation: policy.OpCreate, Namespace: "team", Object: raw}
	const want = `[annotation_limits] metadata.annotations["daemonguard.io/steps"]: value is 262144 bytes, over the limit of 1024 bytes for daemonguard.io/steps; no policy was evaluated on this object`
	for name, run := range map[string]func(context.Context, *policy.Set, Review) Outcome{
		"Validate (the validating webhook)":     core.Validate,
		"Simulate (check, mutate, audit, plan)": core.Simulate,
	} {
		t.Run(name, func(t *testing.T) {
			r := run(context.Background(), set, rv)
			if r.Err() != nil || r.Skip != "" {
				t.Fatalf("ended with %v %q; want a verdict", r.Err(), r.Skip)
			}
			if len(r.Violations) != 1 || r.Verdict.Allowed || !strings.HasPrefix(r.Verdict.DenialMessage(), "denied by daemonguard: "+want) {
				t.Fatalf("violations %v, verdict %q; want one denial %q", r.Violations, r.Verdict.DenialMessage(), want)
			}
			if r.Violations[0].Policy != AnnotationLimitsPolicy || r.Violations[0].Action != policy.Deny {
				t.Errorf("violation %+v; want policy %s denying", r.Violations[0], AnnotationLimitsPolicy)
			}
		})
	}
	m := core.Mutate(context.Background(), set, rv)
	if m.Err() != nil || len(m.Patch) != 0 || !strings.Contains(m.Inject.Reason, "past its size limit") {
		t.Errorf("Mutate: err %v, patch %v, reason %q; want no patch and a reason naming the limit", m.Err(), m.Patch, m.Inject.Reason)
	}

	// What one review costs: decoding the object (about 3.6 times its size) and checking the
	// sizes, not an evaluation.
	bound := uint64(6 * len(raw))
	for name, run := range map[string]func(context.Context, *policy.Set, Review) Outcome{"Validate": core.Validate, "Simulate": core.Simulate} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		run(context.Background(), set, rv)
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > bound {
			t.Errorf("%s allocated %d bytes on a %d-byte object; want under %d (no evaluation)", name, got, len(raw), bound)
		} else {
			t.Logf("%s allocated %d bytes on a %d-byte object", name, got, len(raw))
		}
	}
}

// Only a value past its limit is denied, and only the annotations daemonguard reads have limits;
// an old object past a limit is left out of the input instead of denying the update that fixes it.
func TestAnnotationLimits(t *testing.T) {
	set := builtinSet(t)
	tests := map[string]struct {
		annotations    map[string]any // of the object written
		oldAnnotations map[string]any // of the stored object; nil on CREATE
		wantBound      string         // the field of the one annotation_limits denial; "" for none
	}{
		"steps at their limit are evaluated": {
			annotations: map[string]any{rolloutapi.AnnotationSteps: strings.Repeat("1", 1023) + "%"},
		},
		"steps a byte past their limit are not": {
			annotations: map[string]any{rolloutapi.AnnotationSteps: strings.Repeat("1", 1024) + "%"},
			wantBound:   `metadata.annotations["daemonguard.io/steps"]`,
		},
		"a huge analysis": {
			annotations: map[string]any{rolloutapi.AnnotationAnalysis: strings.Repeat("- ", 100<<10)},
			wantBound:   `metadata.annotations["daemonguard.io/analysis"]`,
		},
		"the first of two oversized values in key order": {
			annotations: map[string]any{rolloutapi.AnnotationSteps: strings.Repeat(",", 2000), rolloutapi.AnnotationPaused: strings.Repeat("t", 300)},
			wantBound:   `metadata.annotations["daemonguard.io/paused"]`,
		},
		"a huge status annotation": {
			annotations: map[string]any{rolloutapi.StatusAnalysis: strings.Repeat("{", 64<<10)},
			wantBound:   `metadata.annotations["status.daemonguard.io/analysis"]`,
		},
		"a huge annotation daemonguard does not read": {
			annotations: map[string]any{"example.com/notes": strings.Repeat("x", 200<<10)},
		},
		"an oversized old object is left out": {
			annotations:    map[string]any{rolloutapi.AnnotationSteps: "100%"},
			oldAnnotations: map[string]any{rolloutapi.AnnotationSteps: strings.Repeat(",", 100<<10)},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rv := Review{Operation: policy.OpCreate, Namespace: "team", Object: annotatedDaemonSet(t, tc.annotations, 0)}
			if tc.oldAnnotations != nil {
				rv.Operation, rv.OldObject = policy.OpUpdate, annotatedDaemonSet(t, tc.oldAnnotations, 0)
			}
			r := (&Reviewer{}).Validate(context.Background(), set, rv)
			if r.Err() != nil {
				t.Fatal(r.Err())
			}
			var bounds []policy.Violation
			for _, v := range r.Violations {
				if v.Policy == AnnotationLimitsPolicy {
					bounds = append(bounds, v)
				}
			}
			switch {
			case tc.wantBound == "" && len(bounds) > 0:
				t.Fatalf("denied by the bound: %v", bounds)
			case tc.wantBound != "" && (len(r.Violations) != 1 || len(bounds) != 1 || bounds[0].Field != tc.wantBound):
				t.Fatalf("violations %v; want only the bound on %s", r.Violations, tc.wantBound)
			}
			if tc.oldAnnotations != nil && r.Input.OldObject != nil {
				t.Error("the oversized old object reached the policies")
			}
		})
	}
}

// A verdict's messages are bounded whatever its violations: at most MaxListedViolations listed,
// each cut at MaxViolationMessage bytes with the count of the rest, the others counted.
func TestVerdictMessagesAreBounded(t *testing.T) {
	tests := map[string]struct {
		n        int    // violations of each action
		message  string // each violation's message
		wantRest string // the count of the rest; "" when all are listed
	}{
		"no violation":                  {n: 0},
		"one short violation":           {n: 1, message: "too wide"},
		"as many as are listed":         {n: MaxListedViolations, message: "too wide"},
		"one more than are listed":      {n: MaxListedViolations + 1, message: "too wide", wantRest: "and 1 more"},
		"100,000 violations of 10 KiB":  {n: 100_000, message: strings.Repeat("x", 10<<10), wantRest: "and 99980 more"},
		"multi-byte text cut in a rune": {n: 30, message: strings.Repeat("é", 1000), wantRest: "and 10 more"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var vs []policy.Violation
			for i := range tc.n {
				vs = append(vs, policy.Violation{Policy: "p", Field: fmt.Sprintf("f%d", i), Message: tc.message, Action: policy.Deny},
					policy.Violation{Policy: "p", Field: fmt.Sprintf("f%d", i), Message: tc.message, Action: policy.Warn})
			}
			v := VerdictOf(vs)
			denial, warnings := v.DenialMessage(), v.WarningMessages()
			total := 0
			for _, w := range warnings {
				total += len(w)
				if !isValidUTF8(w) {
					t.Errorf("warning %q is not UTF-8", w)
				}
			}
			if len(denial) > MaxAnswerMessage || total > MaxAnswerMessage {
				t.Errorf("denial of %d bytes, warnings of %d; want each at most %d", len(denial), total, MaxAnswerMessage)
			}
			if !isValidUTF8(denial) {
				t.Error("the denial is not UTF-8")
			}
			listed := min(tc.n, MaxListedViolations)
			if got := strings.Count(denial, "[p] "); got != listed {
				t.Errorf("%d denials listed; want %d", got, listed)
			}
			if tc.wantRest != "" && (!strings.HasSuffix(denial, tc.wantRest+" denials") || warnings[len(warnings)-1] != tc.wantRest+" daemonguard warnings") {
				t.Errorf("denial ends %q, last warning %q; want %q counted", denial[max(0, len(denial)-40):], warnings[len(warnings)-1], tc.wantRest)
			}
			if len(tc.message) > MaxViolationMessage && !strings.Contains(denial, "more bytes)") {
				t.Error("a long message was not cut with the count of the rest")
			}
		})
	}
}

func isValidUTF8(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }
