package rolloutcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Update is one observation of the followed DaemonSet, or the error that ended the observation.
type Update struct {
	Status StatusReport
	Err    error
}

// FollowOptions says how Follow reports.
type FollowOptions struct {
	Out io.Writer
	// Terminal redraws a single progress line in place (Out is a terminal); otherwise a plain line
	// is printed whenever the status message changes.
	Terminal bool
	// Width is the terminal's width in columns; 0 means unknown (80 is assumed).
	Width int
	// Watch keeps following until the rollout completes or fails; false reports once.
	Watch bool
	// Timeout bounds the wait; 0 means no bound.
	Timeout time.Duration
	// Clock measures Timeout; nil means the real clock.
	Clock clock.Clock
}

// FailedError is returned when daemonguard's rollout controller reports the rollout failed. Its
// message is not printed by Follow: the caller reports the error.
type FailedError struct{ Status StatusReport }

func (e *FailedError) Error() string { return e.Status.Message }

// TimeoutError is returned when the rollout did not finish within FollowOptions.Timeout.
type TimeoutError struct {
	Timeout time.Duration
	Status  StatusReport
}

func (e *TimeoutError) Error() string {
	msg := fmt.Sprintf("timed out after %s waiting for the rollout of daemon set %q to finish", e.Timeout, e.Status.Name)
	if e.Status.Message != "" {
		msg += "; last status: " + e.Status.Message
	}
	return msg
}

// Follow reports the statuses received on updates until the rollout is done (nil), failed
// (*FailedError), the timeout passes (*TimeoutError), ctx ends, or an update carries an error.
// With Watch false it reports the first status and returns (an error only if it is a failure).
func Follow(ctx context.Context, o FollowOptions, updates <-chan Update) (StatusReport, error) {
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	p := &printer{out: o.Out, terminal: o.Terminal, width: o.Width}
	if p.width <= 0 {
		p.width = 80
	}
	var timeout <-chan time.Time
	if o.Timeout > 0 {
		t := clk.NewTimer(o.Timeout)
		defer t.Stop()
		timeout = t.C()
	}
	var last StatusReport
	for {
		select {
		case <-ctx.Done():
			p.newline()
			return last, ctx.Err()
		case <-timeout:
			p.newline()
			if last.Name == "" {
				return last, fmt.Errorf("timed out after %s before the DaemonSet could be read", o.Timeout)
			}
			return last, &TimeoutError{Timeout: o.Timeout, Status: last}
		case u, ok := <-updates:
			if !ok {
				p.newline()
				return last, errors.New("the watch of the DaemonSet ended unexpectedly")
			}
			if u.Err != nil {
				p.newline()
				return last, u.Err
			}
			last = u.Status
			p.show(last)
			switch {
			case last.Failed:
				return last, &FailedError{Status: last}
			case last.Done:
				return last, nil
			case !o.Watch:
				p.once(last)
				return last, nil
			}
		}
	}
}

// printer writes statuses either as plain lines (when the message changes) or as one progress
// line redrawn in place, with permanent lines for warnings and for entering a waiting, paused or
// final state.
type printer struct {
	out      io.Writer
	terminal bool
	width    int

	drawn        bool // a progress line is on screen without its newline
	message      string
	warning      string
	measurements string // the analysis lines last printed
	phase        rolloutapi.Phase
}

func (p *printer) show(s StatusReport) {
	if s.Warning != "" && s.Warning != p.warning {
		p.newline()
		fmt.Fprintln(p.out, "Warning: "+s.Warning)
		p.warning = s.Warning
	}
	// Each new measurement of a gate is a line of the rollout's record, on a terminal too.
	if m := strings.Join(s.Measurements, "\n"); m != "" && m != p.measurements {
		p.newline()
		fmt.Fprintln(p.out, m)
		p.measurements = m
	}
	if !p.terminal {
		if !s.Failed {
			p.println(s.Message)
		}
		return
	}
	switch {
	case s.Phase == rolloutapi.PhaseNotRolling:
		p.println(s.Message)
	case s.Failed:
		p.draw(s)
		p.newline()
	case s.Done:
		p.draw(s)
		p.newline()
		p.println(s.Message)
	default:
		if s.Phase != p.phase && (s.Phase == rolloutapi.PhasePaused || s.Phase == rolloutapi.PhaseWaiting) {
			p.newline()
			p.println(s.Message)
		}
		p.draw(s)
	}
	p.phase = s.Phase
}

// once ends a single report (--watch=false): the progress line gets its newline and the message
// is printed if it was not yet.
func (p *printer) once(s StatusReport) {
	p.newline()
	p.println(s.Message)
}

func (p *printer) println(msg string) {
	if msg == p.message {
		return
	}
	p.newline()
	fmt.Fprintln(p.out, msg)
	p.message = msg
}

func (p *printer) draw(s StatusReport) {
	// One column short of the width, so the cursor never wraps to the next line.
	fmt.Fprint(p.out, "\r\033[K"+ProgressLine(s, p.width-1))
	p.drawn = true
}

func (p *printer) newline() {
	if p.drawn {
		fmt.Fprintln(p.out)
		p.drawn = false
	}
}
