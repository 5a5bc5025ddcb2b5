package rolloutcli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

func feed(updates ...Update) <-chan Update {
	ch := make(chan Update, len(updates))
	for _, u := range updates {
		ch <- u
	}
	return ch // never closed: Follow must stop by itself
}

func progress(updated, desired int32) Update {
	return Update{Status: StatusReport{Name: "agent", Phase: rolloutapi.PhaseProgressing, Updated: updated, Available: updated, Desired: desired,
		Message: "Waiting: " + string(rune('0'+updated)) + " updated"}}
}

var (
	doneUpdate   = Update{Status: StatusReport{Name: "agent", Phase: rolloutapi.PhaseComplete, Done: true, Updated: 4, Available: 4, Desired: 4, Message: `daemon set "agent" successfully rolled out`}}
	failedUpdate = Update{Status: StatusReport{Name: "agent", Managed: true, Phase: rolloutapi.PhaseFailed, Failed: true, Updated: 1, Desired: 4, ControllerCounts: true, Reported: "failed", Message: "rollout failed: PodFailure"}}
	pausedUpdate = Update{Status: StatusReport{Name: "agent", Managed: true, Phase: rolloutapi.PhasePaused, Paused: true, Updated: 2, Desired: 4, ControllerCounts: true, Reported: "paused", Step: "2/3", StepSpec: "pause", Message: "rollout is paused: PausedAtStep"}}
)

func TestFollow(t *testing.T) {
	boom := errors.New("daemon set \"agent\" has been deleted")
	tests := map[string]struct {
		updates  []Update
		terminal bool
		noWatch  bool
		wantErr  func(error) bool
		wantOut  string // exact output
	}{
		"plain output prints a line only when the message changes, until done": {
			updates: []Update{progress(1, 4), progress(1, 4), progress(3, 4), doneUpdate, progress(0, 4)},
			wantOut: "Waiting: 1 updated\nWaiting: 3 updated\ndaemon set \"agent\" successfully rolled out\n",
		},
		"a failed rollout ends with a FailedError": {
			updates: []Update{progress(1, 4), failedUpdate},
			wantErr: func(err error) bool { var f *FailedError; return errors.As(err, &f) && f.Status.Failed },
			wantOut: "Waiting: 1 updated\n", // the error carries the failure
		},
		"a paused rollout is reported and waited out": {
			updates: []Update{pausedUpdate, progress(3, 4), doneUpdate},
			wantOut: "rollout is paused: PausedAtStep\nWaiting: 3 updated\ndaemon set \"agent\" successfully rolled out\n",
		},
		"--watch=false reports once and succeeds while progressing": {
			updates: []Update{progress(1, 4), doneUpdate}, noWatch: true,
			wantOut: "Waiting: 1 updated\n",
		},
		"--watch=false on a paused rollout reports it and succeeds": {
			updates: []Update{pausedUpdate}, noWatch: true,
			wantOut: "rollout is paused: PausedAtStep\n",
		},
		"--watch=false on a failed rollout fails": {
			updates: []Update{failedUpdate}, noWatch: true,
			wantErr: func(err error) bool { var f *FailedError; return errors.As(err, &f) },
			wantOut: "",
		},
		"a watch error ends following with it": {
			updates: []Update{progress(1, 4), {Err: boom}},
			wantErr: func(err error) bool { return errors.Is(err, boom) },
			wantOut: "Waiting: 1 updated\n",
		},
		"a warning is printed once, before the status": {
			updates: []Update{withWarning(progress(1, 4), "mind this"), withWarning(progress(2, 4), "mind this"), doneUpdate},
			wantOut: "Warning: mind this\nWaiting: 1 updated\nWaiting: 2 updated\ndaemon set \"agent\" successfully rolled out\n",
		},
		"a terminal gets one line redrawn in place, then the final message": {
			updates: []Update{progress(1, 4), progress(3, 4), doneUpdate}, terminal: true,
			wantOut: "\r\033[K[#####---------------] 1/4 updated, 1 available" +
				"\r\033[K[###############-----] 3/4 updated, 3 available" +
				"\r\033[K[####################] 4/4 updated, 4 available\n" +
				"daemon set \"agent\" successfully rolled out\n",
		},
		"a terminal gets a permanent line when the rollout pauses": {
			updates: []Update{progress(1, 4), pausedUpdate, pausedUpdate, failedUpdate}, terminal: true,
			wantErr: func(err error) bool { var f *FailedError; return errors.As(err, &f) },
			wantOut: "\r\033[K[#####---------------] 1/4 updated, 1 available\n" +
				"rollout is paused: PausedAtStep\n" +
				"\r\033[K[##########----------] 2/4 nodes updated, step 2/3 (pause), paused" +
				"\r\033[K[##########----------] 2/4 nodes updated, step 2/3 (pause), paused" +
				"\r\033[K[#####---------------] 1/4 nodes updated, failed\n",
		},
		"each new measurement of a gate is printed once, before the status": {
			updates: []Update{
				withMeasurements(progress(1, 4), "gate errors: Passed at 2026-11-26T21:00:00Z: 1 nodes within bounds (max 0.1)"),
				withMeasurements(progress(1, 4), "gate errors: Passed at 2026-11-26T21:00:00Z: 1 nodes within bounds (max 0.1)"),
				withMeasurements(failedUpdate, "gate errors: Failed at 2026-11-26T21:00:30Z: 1 of 1 nodes out of bounds (max 0.1): w1=0.3"),
			},
			wantErr: func(err error) bool { var f *FailedError; return errors.As(err, &f) },
			wantOut: "gate errors: Passed at 2026-11-26T21:00:00Z: 1 nodes within bounds (max 0.1)\nWaiting: 1 updated\n" +
				"gate errors: Failed at 2026-11-26T21:00:30Z: 1 of 1 nodes out of bounds (max 0.1): w1=0.3\n",
		},
		"a terminal with --watch=false ends the line and prints the message": {
			updates: []Update{progress(1, 4)}, terminal: true, noWatch: true,
			wantOut: "\r\033[K[#####---------------] 1/4 updated, 1 available\nWaiting: 1 updated\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			_, err := Follow(context.Background(), FollowOptions{Out: &out, Terminal: tc.terminal, Width: 100, Watch: !tc.noWatch}, feed(tc.updates...))
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !tc.wantErr(err) {
				t.Errorf("Follow returned %v", err)
			}
			if got := out.String(); got != tc.wantOut {
				t.Errorf("output:\n%q\nwant:\n%q", got, tc.wantOut)
			}
		})
	}
}

func withMeasurements(u Update, lines ...string) Update {
	u.Status.Measurements = lines
	return u
}

func withWarning(u Update, w string) Update {
	u.Status.Warning = w
	return u
}

// The timeout is measured on the injected clock: a rollout that never completes ends with a
// TimeoutError carrying the last status once the clock passes the timeout, and not before.
func TestFollowTimesOut(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	updates := make(chan Update)
	type result struct {
		s   StatusReport
		err error
	}
	done := make(chan result, 1)
	var out bytes.Buffer
	go func() {
		s, err := Follow(context.Background(), FollowOptions{Out: &out, Watch: true, Timeout: time.Minute, Clock: clk}, updates)
		done <- result{s, err}
	}()
	updates <- progress(1, 4) // received: Follow is running and its timer is set
	clk.Step(59 * time.Second)
	select { // still following after 59s
	case updates <- progress(2, 4):
	case r := <-done:
		t.Fatalf("Follow returned before the timeout: %v", r.err)
	}
	clk.Step(time.Second)
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not return after the fake clock passed the timeout")
	}
	var te *TimeoutError
	if !errors.As(r.err, &te) || te.Timeout != time.Minute || te.Status.Updated != 2 {
		t.Fatalf("Follow returned %+v, %v; want a TimeoutError after 1m with the last status", r.s, r.err)
	}
	if !strings.Contains(r.err.Error(), `timed out after 1m0s waiting for the rollout of daemon set "agent"`) || !strings.Contains(r.err.Error(), "Waiting: 2 updated") {
		t.Errorf("error %q does not explain the timeout and the last status", r.err)
	}
}

func TestFollowStopsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Follow(ctx, FollowOptions{Out: &bytes.Buffer{}, Watch: true}, make(chan Update))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Follow with a cancelled context returned %v", err)
	}
}
