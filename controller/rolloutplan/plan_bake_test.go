package rolloutplan

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// baking is settings with daemonguard.io/bake parsed from its annotation, as the controller reads them.
func baking(bake string) rolloutapi.Settings {
	s, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationBake: bake})
	if err != nil {
		panic(err)
	}
	return s
}

// completedAt is the status of a rollout of newRev whose every node ran it at at, and whose
// updated count last grew a minute ago.
func completedAt(at time.Time) rolloutapi.Status {
	return rolloutapi.Status{Revision: newRev, Step: rolloutapi.StepPosition{Index: 1, Count: 1}, StepStarted: t0.Add(-time.Hour),
		Progress: t0.Add(-time.Minute), ProgressUpdated: 2, CompletedAt: at}
}

func TestBake(t *testing.T) {
	updated := []NodeState{node("a", pod(newRev, "ready")), node("b", pod(newRev, "ready"))}
	tests := map[string]struct {
		nodes    []NodeState
		settings rolloutapi.Settings
		status   rolloutapi.Status
		now      time.Time // t0 when zero
		// The plan: its phase and reason, an exact message when set, the nodes whose pods it
		// deletes, when it asks to come back, and the completion time it records.
		wantPhase       rolloutapi.Phase
		wantReason      string
		wantMessage     string
		wantDelete      []string
		wantRequeue     time.Duration
		wantCompletedAt time.Time
	}{
		"no bake: complete at once, as before bakes existed": {
			nodes: updated, settings: settings("1", ""), status: completedAt(time.Time{}),
			wantPhase: rolloutapi.PhaseComplete, wantReason: rolloutapi.ReasonComplete, wantMessage: "2 of 2 nodes run revision new",
		},
		"no bake: a completion time left from an earlier bake is dropped": {
			nodes: updated, settings: settings("1", ""), status: completedAt(t0.Add(-time.Minute)),
			wantPhase: rolloutapi.PhaseComplete, wantReason: rolloutapi.ReasonComplete, wantMessage: "2 of 2 nodes run revision new",
		},
		"the bake starts when every node runs the revision": {
			nodes: updated, settings: baking("5m"), status: completedAt(time.Time{}),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonBaking,
			wantMessage: "2 of 2 nodes run revision new; baking 5m0s more (daemonguard.io/bake 5m0s since 2026-11-23T10:00:00Z)",
			wantRequeue: 5 * time.Minute, wantCompletedAt: t0,
		},
		"the bake running: 3m left of 5m": {
			nodes: updated, settings: baking("5m"), status: completedAt(t0.Add(-2 * time.Minute)),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonBaking,
			wantMessage: "2 of 2 nodes run revision new; baking 3m0s more (daemonguard.io/bake 5m0s since 2026-11-23T09:58:00Z)",
			wantRequeue: 3 * time.Minute, wantCompletedAt: t0.Add(-2 * time.Minute),
		},
		"the time left is rounded up, never 0s": {
			nodes: updated, settings: baking("5m"), status: completedAt(t0.Add(-5 * time.Minute)), now: t0.Add(-time.Millisecond),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonBaking,
			wantMessage: "2 of 2 nodes run revision new; baking 1s more (daemonguard.io/bake 5m0s since 2026-11-23T09:55:00Z)",
			wantRequeue: time.Millisecond, wantCompletedAt: t0.Add(-5 * time.Minute),
		},
		"the bake ended: complete at its very end": {
			nodes: updated, settings: baking("5m"), status: completedAt(t0.Add(-5 * time.Minute)),
			wantPhase: rolloutapi.PhaseComplete, wantReason: rolloutapi.ReasonComplete,
			wantMessage:     "2 of 2 nodes run revision new; baked 5m0s since 2026-11-23T09:55:00Z",
			wantCompletedAt: t0.Add(-5 * time.Minute),
		},
		"the bake ended long ago: complete": {
			nodes: updated, settings: baking("5m"), status: completedAt(t0.Add(-48 * time.Hour)),
			wantPhase: rolloutapi.PhaseComplete, wantReason: rolloutapi.ReasonComplete, wantCompletedAt: t0.Add(-48 * time.Hour),
		},
		"a new revision during the bake starts a normal rollout": {
			nodes: olds(3), settings: baking("5m"),
			status:    func() rolloutapi.Status { s := completedAt(t0.Add(-2 * time.Minute)); s.Revision = "older"; return s }(),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonProgressing, wantDelete: []string{"w00"},
			wantRequeue: rolloutapi.DefaultProgressDeadline,
		},
		"a new revision whose pods already run bakes from now, not from the old completion": {
			nodes: updated, settings: baking("5m"),
			status:    func() rolloutapi.Status { s := completedAt(t0.Add(-time.Hour)); s.Revision = "older"; return s }(),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonBaking, wantRequeue: 5 * time.Minute, wantCompletedAt: t0,
		},
		"clock skew: a completion after now stays baking, for the bake from now": {
			nodes: updated, settings: baking("5m"), status: completedAt(t0.Add(10 * time.Minute)),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonBaking, wantRequeue: 5 * time.Minute, wantCompletedAt: t0,
		},
		"clock skew: a completion years ahead never holds longer than the bake": {
			nodes: updated, settings: baking("24h"), status: completedAt(time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonBaking, wantRequeue: 24 * time.Hour, wantCompletedAt: t0,
		},
		"a node that joins during the bake is rolled; the bake runs on from the first completion": {
			nodes: []NodeState{node("a", pod(newRev, "ready")), node("b", pod(oldRev, "ready"))}, settings: baking("5m"),
			status:    completedAt(t0.Add(-2 * time.Minute)),
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonProgressing, wantDelete: []string{"b"},
			wantRequeue: rolloutapi.DefaultProgressDeadline, wantCompletedAt: t0.Add(-2 * time.Minute),
		},
		"a new pod failing during the bake fails the rollout": {
			nodes: []NodeState{node("a", pod(newRev, "ready")), node("b", pod(newRev, "failing"))}, settings: baking("5m"),
			status:    completedAt(t0.Add(-2 * time.Minute)),
			wantPhase: rolloutapi.PhaseFailed, wantReason: rolloutapi.ReasonPodFailure, wantCompletedAt: t0.Add(-2 * time.Minute),
		},
		"gates first: a wave not yet analysed does not bake": {
			nodes: updated,
			settings: func() rolloutapi.Settings {
				s := gated("1", errorsGate, false)
				s.Bake = 5 * time.Minute
				return s
			}(),
			status:    analysing(1, 0),
			wantPhase: rolloutapi.PhaseProgressing, wantRequeue: -1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			now := tc.now
			if now.IsZero() {
				now = t0
			}
			p := Compute(RolloutState{TargetRevision: newRev, Nodes: tc.nodes, Settings: tc.settings, Status: tc.status, Now: now})
			if p.Phase != tc.wantPhase || (tc.wantReason != "" && p.Reason != tc.wantReason) {
				t.Errorf("phase %s/%s, want %s/%s: %s", p.Phase, p.Reason, tc.wantPhase, tc.wantReason, p.Message)
			}
			if tc.wantReason == "" && p.Reason == rolloutapi.ReasonBaking {
				t.Errorf("reason %s, want anything else: %s", p.Reason, p.Message)
			}
			if tc.wantMessage != "" && p.Message != tc.wantMessage {
				t.Errorf("message\n %q\nwant\n %q", p.Message, tc.wantMessage)
			}
			if got := deletedNodes(p); !slices.Equal(got, tc.wantDelete) {
				t.Errorf("deleted on %v, want %v (%s)", got, tc.wantDelete, p.Message)
			}
			if tc.wantRequeue >= 0 && p.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %v, want %v", p.RequeueAfter, tc.wantRequeue)
			}
			if !p.Status.CompletedAt.Equal(tc.wantCompletedAt) {
				t.Errorf("completed at %v, want %v", p.Status.CompletedAt, tc.wantCompletedAt)
			}
			if want := rolloutEvent(p.Phase, p.Reason, p.Message); p.Event != want {
				t.Errorf("event %+v, want %+v", p.Event, want)
			}
		})
	}
}

// The bake runs from the time written in the status annotations, so a controller that restarts
// (or another replica that takes the lead) bakes on from the same moment; a malformed time reads
// as "completed now", and the full bake runs again, never shorter.
func TestBakeSurvivesRestartsThroughTheStatusAnnotations(t *testing.T) {
	in := RolloutState{TargetRevision: newRev, Nodes: []NodeState{node("a", pod(newRev, "ready"))}, Settings: baking("5m"),
		Status: rolloutapi.Status{Revision: newRev}}
	// plan is a reconcile at now by a process that knows only the annotations: the last plan's
	// status, written and read back.
	plan := func(annotations map[string]string, now time.Time) Plan {
		t.Helper()
		status, err := rolloutapi.DecodeStatus(annotations)
		if err != nil {
			t.Fatalf("decode %v: %v", annotations, err)
		}
		in.Status, in.Now = status, now
		return Compute(in)
	}
	first := plan(rolloutapi.EncodeStatus(in.Status), t0.Add(700*time.Millisecond))
	written := rolloutapi.EncodeStatus(first.Status)
	if first.Reason != rolloutapi.ReasonBaking || written[rolloutapi.StatusCompletedAt] != "2026-11-23T10:00:00Z" {
		t.Fatalf("first plan %s, writes %v; want Baking and %s 2026-11-23T10:00:00Z", first.Reason, written, rolloutapi.StatusCompletedAt)
	}
	for _, step := range []struct {
		after      time.Duration
		wantReason string
		wantInMsg  string
	}{
		{3 * time.Minute, rolloutapi.ReasonBaking, "baking 2m0s more"},
		{5*time.Minute - time.Nanosecond, rolloutapi.ReasonBaking, "baking 1s more"},
		{5 * time.Minute, rolloutapi.ReasonComplete, "baked 5m0s since 2026-11-23T10:00:00Z"},
	} {
		p := plan(written, t0.Add(step.after))
		if p.Reason != step.wantReason || !strings.Contains(p.Message, step.wantInMsg) {
			t.Errorf("at +%v after a restart: %s %q, want %s with %q", step.after, p.Reason, p.Message, step.wantReason, step.wantInMsg)
		}
	}

	malformed := map[string]string{rolloutapi.StatusRevision: newRev, rolloutapi.StatusCompletedAt: "2026-11-23 10:00"}
	status, err := rolloutapi.DecodeStatus(malformed)
	if err == nil || !strings.Contains(err.Error(), rolloutapi.StatusCompletedAt+` "2026-11-23 10:00": want an RFC 3339 time`) {
		t.Errorf("decoding a malformed completion time: err %v, want it named", err)
	}
	in.Status, in.Now = status, t0.Add(time.Hour)
	p := Compute(in)
	if p.Reason != rolloutapi.ReasonBaking || p.RequeueAfter != 5*time.Minute || !p.Status.CompletedAt.Equal(in.Now) {
		t.Errorf("a malformed completion time: %s, requeue %v, completed at %v; want Baking the full 5m from %v", p.Reason, p.RequeueAfter, p.Status.CompletedAt, in.Now)
	}
	if got := rolloutapi.StatusChanges(malformed, p.Status)[rolloutapi.StatusCompletedAt]; got == nil || *got != "2026-11-23T11:00:00Z" {
		t.Errorf("the report does not repair the malformed completion time: change %v", got)
	}
}

// Property: for random rollouts, a bake only ever turns a Complete plan into Progressing/Baking
// for at most the bake, and changes nothing else; without a bake, the plan is what it was before
// bakes existed, whatever completion time the status holds.
func TestBakePropertiesHoldForRandomStates(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 9))
	bakes := []time.Duration{time.Nanosecond, time.Second, 5 * time.Minute, rolloutapi.MaxBake}
	held, completed := 0, 0
	for i := range 5000 {
		in := randomState(rng)
		if rng.IntN(2) == 0 { // every node updated, so that the bake has something to hold
			for j := range in.Nodes {
				in.Nodes[j].Pods = nil
				pod(newRev, "ready")(&in.Nodes[j])
			}
		}
		switch rng.IntN(4) {
		case 0: // never completed, or a malformed time
		case 1: // completed in the past
			in.Status.CompletedAt = t0.Add(-time.Duration(rng.Int64N(int64(48 * time.Hour))))
		case 2: // clock skew: completed in the future
			in.Status.CompletedAt = t0.Add(time.Duration(1 + rng.Int64N(int64(48*time.Hour))))
		case 3: // exactly now
			in.Status.CompletedAt = t0
		}
		if rng.IntN(5) == 0 {
			in.Status.Revision = "older"
		}
		bake := bakes[rng.IntN(len(bakes))]

		plain := in
		plain.Status.CompletedAt = time.Time{}
		want := Compute(plain)
		if got := Compute(in); !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d: without a bake, a completion time of %v changes the plan:\n got %+v\nwant %+v", i, in.Status.CompletedAt, got, want)
		}
		if !want.Status.CompletedAt.IsZero() {
			t.Fatalf("case %d: without a bake, the plan records a completion time %v", i, want.Status.CompletedAt)
		}

		in.Settings.Bake = bake
		got := Compute(in)
		kept := in.Status.CompletedAt
		if in.Status.Revision != in.TargetRevision {
			kept = time.Time{}
		}
		if want.Phase != rolloutapi.PhaseComplete {
			want.Status.CompletedAt = kept
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d: a bake changes a plan that is not complete:\n got %+v\nwant %+v", i, got, want)
			}
			continue
		}
		at := got.Status.CompletedAt
		switch {
		case len(got.Delete) > 0:
			t.Fatalf("case %d: a complete rollout deletes %v under a bake", i, deletedNodes(got))
		case at.IsZero() || at.After(t0):
			t.Fatalf("case %d: completed at %v, want a time at most now %v", i, at, t0)
		case !kept.IsZero() && !kept.After(t0) && !at.Equal(kept):
			t.Fatalf("case %d: completed at %v, want the recorded %v", i, at, kept)
		case got.Phase == rolloutapi.PhaseComplete && t0.Before(at.Add(bake)):
			t.Fatalf("case %d: complete at %v, before the bake of %v from %v ends", i, t0, bake, at)
		case got.Phase == rolloutapi.PhaseComplete:
			completed++
		case got.Phase != rolloutapi.PhaseProgressing || got.Reason != rolloutapi.ReasonBaking:
			t.Fatalf("case %d: %s/%s, want Complete or Progressing/Baking", i, got.Phase, got.Reason)
		case got.RequeueAfter <= 0 || got.RequeueAfter > bake || !at.Add(bake).Equal(t0.Add(got.RequeueAfter)):
			t.Fatalf("case %d: baking from %v for %v, requeue after %v, want the bake's end", i, at, bake, got.RequeueAfter)
		case !strings.HasPrefix(got.Message, strings.TrimSuffix(want.Message, skippedNote(want.Skipped))+"; baking ") ||
			!strings.HasSuffix(got.Message, skippedNote(want.Skipped)):
			t.Fatalf("case %d: baking message %q, want the complete message %q with the time left", i, got.Message, want.Message)
		default:
			held++
		}
	}
	// Both outcomes must be exercised, or the test proves nothing.
	if held < 100 || completed < 100 {
		t.Errorf("%d plans held by a bake, %d completed after one; want at least 100 of each", held, completed)
	}
}
