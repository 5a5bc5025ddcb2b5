package admission

// This file holds the core's bounds on what a tenant writes and on what admission answers: an
// annotation past its size limit is denied before any policy runs, and the messages of a verdict
// are bounded in size whatever the violations.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// AnnotationLimitsPolicy names the denial of a DaemonSet with a daemonguard annotation past its
// size limit (rolloutapi.AnnotationLimit). It is a bound, not a policy choice: it always denies,
// whatever the parameters say, and no Rego runs on such an object, so that a value a tenant made
// huge costs a size check, not an evaluation that grows with it.
const AnnotationLimitsPolicy = "annotation_limits"

// oversized is the one denial of an object whose daemonguard annotations hold a value past its
// size limit (the first such key in key order), or nil. Values that are not strings are the
// policies' to deny; keys daemonguard does not read have no limit here (the API server bounds
// all annotations together at 256 KiB).
func oversized(obj map[string]any) *policy.Violation {
	meta, _ := obj["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	limited := map[string]string{}
	for k, v := range annotations {
		if s, ok := v.(string); ok {
			if _, ok := rolloutapi.AnnotationLimit(k); ok {
				limited[k] = s
			}
		}
	}
	err := rolloutapi.CheckAnnotationSizes(limited)
	var tooLarge *rolloutapi.AnnotationTooLargeError
	if !errors.As(err, &tooLarge) {
		return nil
	}
	return &policy.Violation{
		Policy: AnnotationLimitsPolicy, Field: fmt.Sprintf("metadata.annotations[%q]", tooLarge.Key), Action: policy.Deny,
		Message: fmt.Sprintf("value is %d bytes, over the limit of %d bytes for %s; no policy was evaluated on this object (docs/admission.md lists the limits)",
			tooLarge.Size, tooLarge.Limit, tooLarge.Key),
	}
}

// Bounds of a verdict's messages. A denial message lists at most MaxListedViolations violations,
// each cut at MaxViolationMessage bytes, then counts the rest; warnings likewise. The API server
// passes both to the client, and a caller straight to the port reads them: whatever the number or
// size of the violations, a denial message is at most MaxAnswerMessage bytes, and so are the
// warnings together.
const (
	MaxListedViolations = 20
	MaxViolationMessage = 512
	// MaxAnswerMessage: a prefix of under 100 bytes, 20 messages of at most 512 bytes and the
	// count of their cut bytes, separators, and the count of the rest come to under 11 KiB.
	MaxAnswerMessage = 12 << 10
)

// boundedMessages renders each violation with render, at most MaxListedViolations of them, each
// cut at MaxViolationMessage bytes; more is "and N more <noun>".
func boundedMessages(vs []policy.Violation, render func(policy.Violation) string, noun string) []string {
	n := min(len(vs), MaxListedViolations)
	out := make([]string, 0, n+1)
	for _, v := range vs[:n] {
		out = append(out, CutMessage(render(v), MaxViolationMessage))
	}
	if rest := len(vs) - n; rest > 0 {
		out = append(out, fmt.Sprintf("and %d more %s", rest, noun))
	}
	return out
}

// CutMessage is s cut at max bytes on a character boundary (kubetext.Truncate), with the count
// of the bytes left out; s when it fits.
func CutMessage(s string, max int) string {
	if len(s) <= max {
		return s
	}
	kept := kubetext.Truncate(s, max)
	return fmt.Sprintf("%s (%d more bytes)", kept, len(s)-len(strings.TrimSuffix(kept, "…")))
}

// joinDenials is the one denial message of a verdict's denials.
func joinDenials(denials []policy.Violation) string {
	return "denied by daemonguard: " + strings.Join(boundedMessages(denials, policy.Violation.String, "denials"), "; ")
}

// warningMessages are the admission warnings of a verdict's warnings, one per violation.
func warningMessages(warnings []policy.Violation) []string {
	return boundedMessages(warnings, func(w policy.Violation) string { return "daemonguard " + w.String() }, "daemonguard warnings")
}
