package webhook

import (
	"strings"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// Verdict is the admission outcome of a set of violations.
type Verdict struct {
	Allowed  bool
	Denials  []policy.Violation // enforcement deny: the request is rejected with all of them
	Warnings []policy.Violation // enforcement warn: admitted, messages returned to the client
	DryRuns  []policy.Violation // enforcement dryrun: admitted silently, only recorded
}

// Decide sorts violations by their enforcement action. Denials and warnings are kept apart so a
// rejected request still tells the user about every warning too.
func Decide(violations []policy.Violation) Verdict {
	v := Verdict{}
	for _, x := range violations {
		switch x.Action {
		case policy.Warn:
			v.Warnings = append(v.Warnings, x)
		case policy.DryRun:
			v.DryRuns = append(v.DryRuns, x)
		default:
			v.Denials = append(v.Denials, x)
		}
	}
	v.Allowed = len(v.Denials) == 0
	return v
}

// DenialMessage joins the denials into the one message the API server shows the user.
func (v Verdict) DenialMessage() string {
	msgs := make([]string, len(v.Denials))
	for i, d := range v.Denials {
		msgs[i] = d.String()
	}
	return "denied by daemonguard: " + strings.Join(msgs, "; ")
}

// WarningMessages are the admission warnings, one per violation.
func (v Verdict) WarningMessages() []string {
	out := make([]string, len(v.Warnings))
	for i, w := range v.Warnings {
		out[i] = "daemonguard " + w.String()
	}
	return out
}
