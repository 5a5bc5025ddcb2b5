package rolloutcli

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Bar renders done out of total as a bar of width cells between brackets, e.g. "[#####-----]".
// done is clamped to [0, total]; the bar is full only when done == total, and a total of zero
// (nothing to roll out) reads as full. width below 1 counts as 1.
func Bar(done, total int32, width int) string {
	if width < 1 {
		width = 1
	}
	filled := width
	if total > 0 {
		d := min(max(done, 0), total)
		filled = int(int64(d) * int64(width) / int64(total))
	}
	return "[" + strings.Repeat("#", filled) + strings.Repeat("-", width-filled) + "]"
}

// barWidth is the number of cells of the progress bar.
const barWidth = 20

// ProgressLine is the single line redrawn on a terminal, e.g.
// "[#########-----------] 9/20 nodes updated, step 3/5 (25%), next: worker-3, worker-4",
// cut to width runes (no cut when width < 1). Its counts come from one source (see StatusReport).
func ProgressLine(s StatusReport, width int) string {
	var b strings.Builder
	b.WriteString(Bar(s.Updated, s.Desired, barWidth))
	if s.ControllerCounts {
		fmt.Fprintf(&b, " %d/%d nodes updated", s.Updated, s.Desired)
	} else {
		fmt.Fprintf(&b, " %d/%d updated, %d available", s.Updated, s.Desired, s.Available)
	}
	if s.Step != "" {
		b.WriteString(", step " + s.Step)
		if s.StepSpec != "" {
			b.WriteString(" (" + s.StepSpec + ")")
		}
	}
	if state := progressState(s); state != "" {
		b.WriteString(", " + state)
	}
	if s.Next != "" && !s.Done {
		b.WriteString(", next: " + s.Next)
	}
	return FitWidth(b.String(), width)
}

// FitWidth cuts s to at most width runes, ending in "…" when cut; width < 1 means no limit.
func FitWidth(s string, width int) string {
	if width < 1 || utf8.RuneCountInString(s) <= width {
		return s
	}
	if width == 1 {
		return "…"
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// progressState is the word the progress line puts after the step: from the controller's status
// annotations, like the counts and the step beside it, when those are shown (ControllerCounts);
// otherwise from the phase.
func progressState(s StatusReport) string {
	if s.ControllerCounts {
		return s.Reported
	}
	switch s.Phase {
	case rolloutapi.PhasePaused:
		return "paused"
	case rolloutapi.PhaseFailed:
		return "failed"
	case rolloutapi.PhaseWaiting:
		return "waiting"
	}
	return ""
}
