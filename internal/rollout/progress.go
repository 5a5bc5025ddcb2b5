package rollout

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
// "[#########-----------] 9/20 updated, step 3/5 (25%), next: worker-3, worker-4",
// cut to width runes (no cut when width < 1).
func ProgressLine(s Status, width int) string {
	var b strings.Builder
	b.WriteString(Bar(s.Updated, s.Desired, barWidth))
	fmt.Fprintf(&b, " %d/%d updated", s.Updated, s.Desired)
	if !s.Managed || s.Phase == rolloutapi.PhaseComplete {
		fmt.Fprintf(&b, ", %d available", s.Available)
	}
	if s.Step != "" {
		b.WriteString(", step " + s.Step)
		if s.StepSpec != "" {
			b.WriteString(" (" + s.StepSpec + ")")
		}
	}
	switch s.Phase {
	case rolloutapi.PhasePaused:
		b.WriteString(", paused")
	case rolloutapi.PhaseFailed:
		b.WriteString(", failed")
	case rolloutapi.PhaseWaiting:
		b.WriteString(", waiting")
	}
	if s.Next != "" && !s.Done {
		b.WriteString(", next: " + s.Next)
	}
	return Truncate(b.String(), width)
}

// Truncate cuts s to at most width runes, ending in "…" when cut; width < 1 means no limit.
func Truncate(s string, width int) string {
	if width < 1 || utf8.RuneCountInString(s) <= width {
		return s
	}
	if width == 1 {
		return "…"
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}
