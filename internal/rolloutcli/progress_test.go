package rolloutcli

import (
	"testing"
	"unicode/utf8"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

func TestBar(t *testing.T) {
	tests := map[string]struct {
		done, total int32
		width       int
		want        string
	}{
		"9 of 20 on 20 cells fills 9":              {9, 20, 20, "[#########-----------]"},
		"half on 10 cells":                         {2, 4, 10, "[#####-----]"},
		"nothing done is empty":                    {0, 4, 4, "[----]"},
		"all done is full":                         {4, 4, 4, "[####]"},
		"almost done is never full":                {99, 100, 10, "[#########-]"},
		"a little done rounds down to empty":       {1, 100, 10, "[----------]"},
		"more done than total is clamped to full":  {7, 4, 4, "[####]"},
		"negative done is clamped to empty":        {-3, 4, 4, "[----]"},
		"nothing to do (total 0) reads as full":    {0, 0, 5, "[#####]"},
		"a width below one is one cell":            {1, 2, 0, "[-]"},
		"one cell fills only when done":            {2, 2, -5, "[#]"},
		"large counts do not overflow the product": {1 << 30, 1<<30 + 1, 50, "[#################################################-]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Bar(tc.done, tc.total, tc.width); got != tc.want {
				t.Errorf("Bar(%d, %d, %d) = %q, want %q", tc.done, tc.total, tc.width, got, tc.want)
			}
		})
	}
}

func TestProgressLine(t *testing.T) {
	managedProgress := StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 9, Desired: 20, ControllerCounts: true, Step: "3/5", StepSpec: "25%", Next: "worker-3, worker-4"}
	tests := map[string]struct {
		s     StatusReport
		width int
		want  string
	}{
		"managed progress shows step and next nodes": {
			s: managedProgress, want: "[#########-----------] 9/20 nodes updated, step 3/5 (25%), next: worker-3, worker-4",
		},
		"managed paused says so": {
			s:    StatusReport{Managed: true, Phase: rolloutapi.PhasePaused, Updated: 2, Desired: 4, ControllerCounts: true, Reported: "paused", Step: "2/3", StepSpec: "pause"},
			want: "[##########----------] 2/4 nodes updated, step 2/3 (pause), paused",
		},
		"unmanaged progress shows availability": {
			s:    StatusReport{Phase: rolloutapi.PhaseProgressing, Updated: 3, Available: 2, Desired: 4},
			want: "[###############-----] 3/4 updated, 2 available",
		},
		"waiting for the controller says so": {
			s:    StatusReport{Phase: rolloutapi.PhaseWaiting, Updated: 0, Available: 4, Desired: 4},
			want: "[--------------------] 0/4 updated, 4 available, waiting",
		},
		"a narrow terminal cuts the line": {
			s: managedProgress, width: 30, want: "[#########-----------] 9/20 n…",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ProgressLine(tc.s, tc.width)
			if got != tc.want {
				t.Errorf("ProgressLine = %q, want %q", got, tc.want)
			}
			if tc.width > 0 && utf8.RuneCountInString(got) > tc.width {
				t.Errorf("line of %d runes exceeds width %d", utf8.RuneCountInString(got), tc.width)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	tests := map[string]struct {
		in    string
		width int
		want  string
	}{
		"fits":                      {"abc", 3, "abc"},
		"cut with an ellipsis":      {"abcdef", 4, "abc…"},
		"no limit":                  {"abcdef", 0, "abcdef"},
		"one column":                {"abcdef", 1, "…"},
		"runes, not bytes, counted": {"ééééé", 3, "éé…"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := FitWidth(tc.in, tc.width); got != tc.want {
				t.Errorf("FitWidth(%q, %d) = %q, want %q", tc.in, tc.width, got, tc.want)
			}
		})
	}
}
