// Package argocd ships daemonguard's Argo CD health checks: Lua scripts for the argocd-cm keys
// resource.customizations.health.apps_DaemonSet and resource.customizations.health.ConfigMap.
// Argo CD reports every OnDelete DaemonSet as Healthy; with the first check a DaemonSet managed by
// daemonguard's rollout controller reports the rollout's progress (Progressing), pauses
// (Suspended), failures (Degraded) and completion (Healthy), while every other DaemonSet keeps
// Argo CD's built-in assessment. With the second a policy ConfigMap whose Rego the webhook
// rejected is Degraded with the webhook's error.
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

// ConfigMapHealthLua is the health check script for ConfigMaps: a daemonguard policy ConfigMap
// carrying the webhook's policy error annotation is Degraded with it, any other ConfigMap is
// Healthy. It needs no extra libraries either.
//
//go:embed configmap_health.lua
var ConfigMapHealthLua string

// ConfigMapHealthKey is the argocd-cm key that holds ConfigMapHealthLua (core group: the kind
// alone).
const ConfigMapHealthKey = "resource.customizations.health.ConfigMap"

// ArgoCDConfigSnippet returns the argocd-cm data entries, as YAML, that install the health
// checks: HealthKey and ConfigMapHealthKey, each followed by its script as a literal block scalar
// indented by two spaces. Indented by a further two spaces they go under a ConfigMap's data:, or
// under configs.cm in the Argo CD Helm chart's values.
func ArgoCDConfigSnippet() string {
	return HealthKey + ": " + literalBlock(HealthLua, "  ") + ConfigMapHealthKey + ": " + literalBlock(ConfigMapHealthLua, "  ")
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
