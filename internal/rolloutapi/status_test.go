package rolloutapi

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

func TestDecodeStatus(t *testing.T) {
	tests := map[string]struct {
		annotations map[string]string
		want        Status
		wantErr     []string // each in the error; none means no error
	}{
		"nothing written yet: the zero status": {
			annotations: map[string]string{"daemonguard.io/rollout": "managed"},
		},
		"everything the controller writes": {
			annotations: map[string]string{
				StatusRevision: "abc", StatusStep: "3/5: 25%", StatusStepStarted: "2026-11-23T10:00:00Z",
				StatusPauseToken: "t1", StatusUpdated: "9/20", StatusNextNodes: "worker-3,worker-4 (workers first)",
				StatusProgress: "9@2026-11-23T10:00:00Z", StatusFailedRevision: "old", StatusCompletedAt: "2026-11-23T10:00:00Z",
			},
			want: Status{
				Revision: "abc", Step: StepPosition{Index: 2, Count: 5, Spec: "25%"}, StepStarted: t0, PauseToken: "t1",
				Counts: &Counts{Updated: 9, Desired: 20}, NextNodes: []string{"worker-3", "worker-4"}, NextReason: "workers first",
				Progress: t0, ProgressUpdated: 9, FailedRevision: "old", CompletedAt: t0,
			},
		},
		"done: the index is past the last step": {
			annotations: map[string]string{StatusStep: "1/1: done"},
			want:        Status{Step: StepPosition{Index: 1, Count: 1}},
		},
		"a timed pause keeps the colon of its duration": {
			annotations: map[string]string{StatusStep: "2/3: pause:5m"},
			want:        Status{Step: StepPosition{Index: 1, Count: 3, Spec: "pause:5m"}},
		},
		"a step without its text": {
			annotations: map[string]string{StatusStep: "2/3"},
			want:        Status{Step: StepPosition{Index: 1, Count: 3}},
		},
		"next nodes with a reason holding parentheses": {
			annotations: map[string]string{StatusNextNodes: `a (one zone at a time (now "z"), then by name)`},
			want:        Status{NextNodes: []string{"a"}, NextReason: `one zone at a time (now "z"), then by name`},
		},
		"next nodes without a reason": {
			annotations: map[string]string{StatusNextNodes: "a, b"},
			want:        Status{NextNodes: []string{"a", "b"}},
		},
		"empty next nodes": {
			annotations: map[string]string{StatusNextNodes: ""},
		},
		"malformed values are named and left out, the rest is decoded": {
			annotations: map[string]string{
				StatusRevision: "abc", StatusStep: "x/5: 25%", StatusStepStarted: "yesterday",
				StatusUpdated: "9 of 20", StatusProgress: "9@noon", StatusCompletedAt: "just now",
			},
			want: Status{Revision: "abc"},
			wantErr: []string{StatusStep + ` "x/5: 25%"`, StatusStepStarted + ` "yesterday"`, StatusUpdated + ` "9 of 20"`, StatusProgress + ` "9@noon"`,
				StatusCompletedAt + ` "just now": want an RFC 3339 time`},
		},
		"a step index beyond the count is malformed": {
			annotations: map[string]string{StatusStep: "6/5: 25%"},
			wantErr:     []string{StatusStep},
		},
		"negative counts are malformed": {
			annotations: map[string]string{StatusUpdated: "-1/5", StatusProgress: "-1@2026-11-23T10:00:00Z"},
			wantErr:     []string{StatusUpdated, StatusProgress},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := DecodeStatus(tc.annotations)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("DecodeStatus =\n %+v\nwant\n %+v", got, tc.want)
			}
			if len(tc.wantErr) == 0 && err != nil {
				t.Errorf("err = %v, want none", err)
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v, want it to name %s", err, w)
				}
			}
		})
	}
}

func TestEncodeStatus(t *testing.T) {
	tests := map[string]struct {
		status Status
		want   map[string]string
	}{
		"the zero status writes nothing": {want: map[string]string{}},
		"a step in progress": {
			status: Status{Revision: "abc", Step: StepPosition{Index: 2, Count: 5, Spec: "25%"}, StepStarted: t0.In(time.FixedZone("CET", 3600)), Counts: &Counts{Updated: 0, Desired: 4}},
			want:   map[string]string{StatusRevision: "abc", StatusStep: "3/5: 25%", StatusStepStarted: "2026-11-23T10:00:00Z", StatusUpdated: "0/4"},
		},
		"every step done": {
			status: Status{Step: StepPosition{Index: 5, Count: 5}},
			want:   map[string]string{StatusStep: "5/5: done"},
		},
		"next nodes and why": {
			status: Status{NextNodes: []string{"a", "b"}, NextReason: "workers first"},
			want:   map[string]string{StatusNextNodes: "a,b (workers first)"},
		},
		"a reason without next nodes is not written": {
			status: Status{NextReason: "workers first"},
			want:   map[string]string{},
		},
		"progress with no pod updated yet": {
			status: Status{Progress: t0},
			want:   map[string]string{StatusProgress: "0@2026-11-23T10:00:00Z"},
		},
		"a completion time, in UTC to the second": {
			status: Status{CompletedAt: t0.Add(500 * time.Millisecond).In(time.FixedZone("CET", 3600))},
			want:   map[string]string{StatusCompletedAt: "2026-11-23T10:00:00Z"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := EncodeStatus(tc.status); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("EncodeStatus = %v, want %v", got, tc.want)
			}
		})
	}
}

// randomStatus is a status the controller could write: times to the second in UTC, node names
// without separators, a reason only with next nodes.
func randomStatus(r *rand.Rand) Status {
	pick := func(vals ...string) string { return vals[r.IntN(len(vals))] }
	at := func() time.Time {
		if r.IntN(4) == 0 {
			return time.Time{}
		}
		return t0.Add(time.Duration(r.IntN(1_000_000)) * time.Second)
	}
	s := Status{
		Revision:       pick("", "abc", "agent-6d5f8"),
		StepStarted:    at(),
		PauseToken:     pick("", "t1", "2026-11-23T10:00:00Z"),
		FailedRevision: pick("", "abc", "old"),
		Progress:       at(),
	}
	if !s.Progress.IsZero() {
		s.ProgressUpdated = r.IntN(1000)
	}
	if n := r.IntN(6); n > 0 {
		s.Step = StepPosition{Index: r.IntN(n + 1), Count: n}
		if !s.Step.Done() {
			s.Step.Spec = pick("1", "25%", "100%", "pause", "pause:5m")
		}
	}
	if r.IntN(2) == 0 {
		d := r.IntN(1000)
		s.Counts = &Counts{Updated: r.IntN(d + 1), Desired: d}
	}
	for range r.IntN(4) {
		s.NextNodes = append(s.NextNodes, fmt.Sprintf("worker-%d", r.IntN(100)))
	}
	if len(s.NextNodes) > 0 {
		s.NextReason = pick("", "workers before control-plane nodes, then by name", `one zone at a time (now "z"), then by name`)
	}
	if r.IntN(2) == 0 {
		a := &AnalysisStatus{VerifiedAt: at(), Wave: r.IntN(5)}
		for i := range r.IntN(3) {
			g := GateStatus{Name: fmt.Sprintf("gate-%d", i), Passed: r.IntN(4), Next: at()}
			if r.IntN(2) == 0 {
				g.Last = &GateMeasurement{At: t0, Result: pick(MeasurementPassed, MeasurementFailed, MeasurementInconclusive), Message: pick("", "worker-1=0.5 above max 0.1")}
			}
			a.Gates = append(a.Gates, g)
		}
		if a.VerifiedAt.IsZero() && a.Wave == 0 && len(a.Gates) == 0 {
			a = nil // written as no annotation, read as nil
		}
		s.Analysis = a
	}
	s.CompletedAt = at()
	return s
}

func TestStatusRoundTrips(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		s := randomStatus(r)
		a := EncodeStatus(s)
		got, err := DecodeStatus(a)
		if err != nil {
			t.Fatalf("case %d: DecodeStatus(%v): %v", i, a, err)
		}
		if !reflect.DeepEqual(got, s) {
			t.Fatalf("case %d: round trip through %v\n got %+v\nwant %+v", i, a, got, s)
		}
		if again := EncodeStatus(got); !reflect.DeepEqual(again, a) {
			t.Fatalf("case %d: re-encoded %v, first encoded %v", i, again, a)
		}
		if changes := StatusChanges(a, s); len(changes) != 0 {
			t.Fatalf("case %d: status already written, yet changes %v", i, changes)
		}
	}
}

func TestStatusChanges(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := map[string]struct {
		current map[string]string
		status  Status
		want    map[string]*string
	}{
		"first report sets its keys": {
			current: map[string]string{AnnotationRollout: RolloutManaged},
			status:  Status{Revision: "abc", Counts: &Counts{Desired: 3}},
			want:    map[string]*string{StatusRevision: str("abc"), StatusUpdated: str("0/3")},
		},
		"a changed key is set, an equal one left alone": {
			current: map[string]string{StatusRevision: "abc", StatusUpdated: "0/3"},
			status:  Status{Revision: "abc", Counts: &Counts{Updated: 1, Desired: 3}},
			want:    map[string]*string{StatusUpdated: str("1/3")},
		},
		"a key no longer written is removed": {
			current: map[string]string{StatusRevision: "abc", StatusFailedRevision: "abc", StatusNextNodes: "a (why)"},
			status:  Status{Revision: "abc"},
			want:    map[string]*string{StatusFailedRevision: nil, StatusNextNodes: nil},
		},
		"other annotations, even under the status prefix, are never touched": {
			current: map[string]string{AnnotationPaused: "true", StatusPrefix + "someone-elses": "x"},
			status:  Status{},
			want:    map[string]*string{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := StatusChanges(tc.current, tc.status); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("StatusChanges = %s, want %s", show(got), show(tc.want))
			}
		})
	}
}

func show(m map[string]*string) string {
	var b strings.Builder
	for k, v := range m {
		if v == nil {
			fmt.Fprintf(&b, "%s=<remove> ", k)
		} else {
			fmt.Fprintf(&b, "%s=%q ", k, *v)
		}
	}
	return b.String()
}

func TestStepPosition(t *testing.T) {
	tests := map[string]struct {
		pos                     StepPosition
		position, label, String string
	}{
		"unknown":        {},
		"the first step": {pos: StepPosition{Index: 0, Count: 3, Spec: "1"}, position: "1/3", label: "1", String: "1/3: 1"},
		"done":           {pos: StepPosition{Index: 3, Count: 3}, position: "3/3", label: "done", String: "3/3: done"},
		"no text":        {pos: StepPosition{Index: 1, Count: 3}, position: "2/3", String: "2/3"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if p, l, s := tc.pos.Position(), tc.pos.Label(), tc.pos.String(); p != tc.position || l != tc.label || s != tc.String {
				t.Errorf("Position, Label, String = %q, %q, %q; want %q, %q, %q", p, l, s, tc.position, tc.label, tc.String)
			}
		})
	}
}
