package rolloutplan

import (
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// reconcileStep is one reconcile of a sequence: either at the moment the last plan asked to come
// back (the gate is due and measured with measured) or a moment after the last one, as a pod
// event would bring it (between measurements, nothing measured).
type reconcileStep struct {
	between bool // a reconcile one second after the last, before the gate is due
	// With between: the reconcile comes 0.9 s before the gate is due instead, within the
	// one-second floor of the wait it asks for.
	lastSecond bool
	measured   *rolloutanalysis.Measurement // the answer when due; nil: the controller did not measure
	// What the reconcile must report.
	wantPhase rolloutapi.Phase
	wantEvent bool          // an Event is recorded: the condition's phase or reason changed, or CauseChanged
	wantNext  time.Duration // the wait until the next measurement the plan asks for (0: not checked)
	wantInMsg string
}

// TestAnInconclusiveGateStaysPaused replays the controller's reconciles of a wave whose gate has
// no data: each plan's status is written to the annotations and read back for the next, and
// the clock moves to the time the plan asked to come back, or one second on for a reconcile in
// between. The condition must stay Paused until a measurement passes or fails, record an Event
// only when the cause changes, and measure again after a doubling wait.
func TestAnInconclusiveGateStaysPaused(t *testing.T) {
	// The wave is nodes a and b: their new pods have been Ready for an hour; c runs the old one.
	wave := []NodeState{node("a", pod(newRev, "ready")), node("b", pod(newRev, "ready")), node("c", pod(oldRev, "ready"))}
	noA := &rolloutanalysis.Measurement{Gate: "errors", Values: values("b", 0.0)}
	noB := &rolloutanalysis.Measurement{Gate: "errors", Values: values("a", 0.0)}
	down := &rolloutanalysis.Measurement{Gate: "errors", Err: "Prometheus unreachable"}
	pass := &rolloutanalysis.Measurement{Gate: "errors", Values: values("a", 0.0, "b", 0.0)}
	fail := &rolloutanalysis.Measurement{Gate: "errors", Values: values("a", 0.5, "b", 0.0)}
	paused, progressing := rolloutapi.PhasePaused, rolloutapi.PhaseProgressing
	tests := map[string][]reconcileStep{
		"no data for ever: Paused throughout, one Event, the wait doubling up to five minutes": {
			{measured: noA, wantPhase: paused, wantEvent: true, wantNext: 30 * time.Second, wantInMsg: "gate errors: no sample labelled node for 1 of 2 nodes: a"},
			{between: true, wantPhase: paused, wantNext: 29 * time.Second, wantInMsg: "gate errors: no sample labelled node for 1 of 2 nodes: a"},
			{between: true, lastSecond: true, wantPhase: paused, wantNext: time.Second},
			{measured: noA, wantPhase: paused, wantNext: time.Minute},
			{between: true, wantPhase: paused},
			{measured: noA, wantPhase: paused, wantNext: 2 * time.Minute},
			{measured: noA, wantPhase: paused, wantNext: 4 * time.Minute},
			{between: true, wantPhase: paused},
			{measured: noA, wantPhase: paused, wantNext: 5 * time.Minute},
			{measured: noA, wantPhase: paused, wantNext: 5 * time.Minute},
			{measured: noA, wantPhase: paused, wantNext: 5 * time.Minute},
		},
		"a new cause is a new Event: other nodes missing, then no answer at all": {
			{measured: noA, wantPhase: paused, wantEvent: true, wantNext: 30 * time.Second},
			{measured: noA, wantPhase: paused, wantNext: time.Minute},
			{measured: noB, wantPhase: paused, wantEvent: true, wantNext: 2 * time.Minute, wantInMsg: "for 1 of 2 nodes: b"},
			{between: true, wantPhase: paused, wantInMsg: "for 1 of 2 nodes: b"},
			{measured: down, wantPhase: paused, wantEvent: true, wantNext: 4 * time.Minute, wantInMsg: "no answer from Prometheus: Prometheus unreachable"},
			{measured: down, wantPhase: paused, wantNext: 5 * time.Minute},
			{measured: noB, wantPhase: paused, wantEvent: true, wantNext: 5 * time.Minute},
			{measured: nil, wantPhase: paused, wantEvent: true, wantNext: 5 * time.Minute, wantInMsg: "gate errors: not measured"},
		},
		"a passing measurement ends the pause and the backoff": {
			{measured: noA, wantPhase: paused, wantEvent: true, wantNext: 30 * time.Second},
			{measured: noA, wantPhase: paused, wantNext: time.Minute},
			{measured: pass, wantPhase: progressing, wantEvent: true, wantNext: 30 * time.Second, wantInMsg: "errors 1/3 passed"},
			{between: true, wantPhase: progressing},
			{between: true, lastSecond: true, wantPhase: progressing, wantNext: time.Second},
			{measured: noA, wantPhase: paused, wantEvent: true, wantNext: 30 * time.Second},
			{measured: pass, wantPhase: progressing, wantEvent: true, wantNext: 30 * time.Second, wantInMsg: "errors 2/3 passed"},
		},
		"a failing measurement ends the pause and halts": {
			{measured: noA, wantPhase: paused, wantEvent: true, wantNext: 30 * time.Second},
			{measured: fail, wantPhase: rolloutapi.PhaseFailed, wantEvent: true, wantInMsg: "a=0.5"},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			// Measurements are due at a fraction of a second, as the controller's clock puts them.
			now := t0.Add(900 * time.Millisecond)
			status := analysing(2, 0)
			status.Analysis.Gates[0].Next = now
			var shown *Plan // the condition the DaemonSet shows
			for i, step := range steps {
				in := RolloutState{Name: "agent", Namespace: "ns", TargetRevision: newRev, Nodes: wave,
					Settings: gated("2", strings.Replace(errorsGate, "count: 2", "count: 3", 1), false), Status: status, Now: now}
				if !step.between {
					if req := DueAnalysis(in); req == nil {
						t.Fatalf("reconcile %d at %s: no measurement due", i, now)
					}
					if step.measured != nil {
						in.Measurements = []rolloutanalysis.Measurement{*step.measured}
					}
				} else if req := DueAnalysis(in); req != nil {
					t.Fatalf("reconcile %d at %s between measurements: a measurement is due", i, now)
				}
				plan := Compute(in)
				if plan.Phase != step.wantPhase {
					t.Fatalf("reconcile %d: phase %s/%s, want %s: %s", i, plan.Phase, plan.Reason, step.wantPhase, plan.Message)
				}
				if step.wantInMsg != "" && !strings.Contains(plan.Message, step.wantInMsg) {
					t.Errorf("reconcile %d: message %q does not say %q", i, plan.Message, step.wantInMsg)
				}
				event := shown == nil || shown.Phase != plan.Phase || shown.Reason != plan.Reason || plan.CauseChanged
				if event != step.wantEvent {
					t.Errorf("reconcile %d: Event recorded %v, want %v: %s", i, event, step.wantEvent, plan.Message)
				}
				if step.between && plan.Message != shown.Message {
					t.Errorf("reconcile %d between measurements rewrote the condition:\n%s\nwas\n%s", i, plan.Message, shown.Message)
				}
				if step.wantNext != 0 && plan.RequeueAfter != step.wantNext {
					t.Errorf("reconcile %d: next measurement in %s, want %s", i, plan.RequeueAfter, step.wantNext)
				}
				// The controller's memory is what the annotations hold.
				var err error
				if status, err = rolloutapi.DecodeStatus(rolloutapi.EncodeStatus(plan.Status)); err != nil {
					t.Fatal(err)
				}
				shown = &plan
				switch next := i + 1; {
				case next < len(steps) && steps[next].lastSecond:
					now = now.Add(plan.RequeueAfter - 900*time.Millisecond)
				case next < len(steps) && steps[next].between:
					now = now.Add(time.Second)
				default:
					now = now.Add(plan.RequeueAfter)
				}
			}
		})
	}
}

func TestInconclusiveDelay(t *testing.T) {
	tests := map[string]struct {
		interval time.Duration
		run      int
		want     time.Duration
	}{
		"after a passed measurement, one interval":                {30 * time.Second, 0, 30 * time.Second},
		"after the first inconclusive one, one interval":          {30 * time.Second, 1, 30 * time.Second},
		"after the third in a row, four intervals":                {30 * time.Second, 3, 2 * time.Minute},
		"after many in a row, five minutes":                       {30 * time.Second, 1000, maxInconclusiveDelay},
		"a one-second gate doubles up to five minutes":            {time.Second, 9, 256 * time.Second},
		"a one-second gate's wait stops at five minutes":          {time.Second, 10, maxInconclusiveDelay},
		"a gate measured hourly keeps its interval":               {time.Hour, 5, time.Hour},
		"a gate just under the cap doubles to the cap, not twice": {4 * time.Minute, 2, maxInconclusiveDelay},
	}
	for name, tc := range tests {
		if got := inconclusiveDelay(tc.interval, tc.run); got != tc.want {
			t.Errorf("%s: inconclusiveDelay(%s, %d) = %s, want %s", name, tc.interval, tc.run, got, tc.want)
		}
	}
	// Whatever the run, the wait is between the interval and the cap.
	for _, interval := range []time.Duration{rolloutapi.MinGateInterval, rolloutapi.DefaultGateInterval, rolloutapi.MaxGateInterval} {
		for run := range 100 {
			if d := inconclusiveDelay(interval, run); d < interval || d > max(interval, maxInconclusiveDelay) {
				t.Errorf("inconclusiveDelay(%s, %d) = %s, outside [interval, max(interval, %s)]", interval, run, d, maxInconclusiveDelay)
			}
		}
	}
}
