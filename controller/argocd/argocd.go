// Package argocd ships daemonguard's Argo CD health check: a Lua script for the argocd-cm key
// resource.customizations.health.apps_DaemonSet. Argo CD reports every OnDelete DaemonSet as
// Healthy; with this check a DaemonSet managed by daemonguard's rollout controller reports the
// rollout's progress (Progressing), pauses (Suspended), failures (Degraded) and completion
// (Healthy), while every other DaemonSet keeps Argo CD's built-in assessment.
package argocd

import (
	_ "embed"
	"strconv"
	"strings"
)

// HealthLua is the health check script. It needs no extra libraries (no useOpenLibs).
//
//go:embed health.lua
var HealthLua string

// HealthKey is the argocd-cm key that holds the script.
const HealthKey = "resource.customizations.health.apps_DaemonSet"

// ArgoCDConfigSnippet returns the argocd-cm data entry, as YAML, that installs the health check:
// HealthKey followed by the script as a literal block scalar indented by two spaces. Indented by
// a further two spaces it goes under a ConfigMap's data:, or under configs.cm in the Argo CD Helm
// chart's values.
func ArgoCDConfigSnippet() string {
	return HealthKey + ": " + literalBlock(HealthLua, "  ")
}

// literalBlock renders s as a YAML literal block scalar (header line included) whose content
// lines are prefixed with indent, such that parsing it yields exactly s. Text a literal block
// cannot carry exactly (blank, or with carriage returns or other control characters, which YAML
// folds or rejects) is rendered as a double-quoted scalar instead.
func literalBlock(s, indent string) string {
	body := strings.TrimRight(s, "\n")
	if strings.TrimSpace(s) == "" || strings.ContainsFunc(s, func(r rune) bool {
		return r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || r == 0xfeff)
	}) {
		return strconv.Quote(s) + "\n"
	}
	header := "|"
	// An explicit indentation indicator when the first line starts with a space, which would
	// otherwise be taken as part of the block's indentation.
	if strings.HasPrefix(strings.TrimLeft(body, "\n"), " ") {
		header += "2"
	}
	switch trailing := len(s) - len(body); {
	case trailing == 0:
		header += "-" // strip: no final line break
	case trailing > 1:
		header += "+" // keep: the extra line breaks are content
	}
	var b strings.Builder
	b.WriteString(header)
	b.WriteString("\n")
	if body != "" {
		for _, line := range strings.Split(body, "\n") {
			if line != "" {
				b.WriteString(indent)
				b.WriteString(line)
			}
			b.WriteString("\n")
		}
	}
	for i := 1; i < len(s)-len(body); i++ {
		b.WriteString("\n")
	}
	return b.String()
}
