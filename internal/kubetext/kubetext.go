// Package kubetext shapes the free text daemonguard writes: Truncate bounds what goes into
// Kubernetes objects (annotation values, report descriptions), whose size the API server and etcd
// limit; Indent lays out multi-line text (a pod template, a diff) inside the CLI's reports; List
// names the first few of many items (nodes) in a message.
package kubetext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Truncate returns s when it has at most maxBytes bytes, otherwise its longest prefix that ends
// on a rune boundary and leaves room for a closing "…" within maxBytes, followed by "…".
func Truncate(s string, maxBytes int) string {
	if len(s) <= maxBytes {
		return s
	}
	cut := maxBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + "…"
}

// Indent puts prefix before every line of text that is not empty.
func Indent(text, prefix string) string {
	var out []byte
	start := true
	for i := 0; i < len(text); i++ {
		if start && text[i] != '\n' {
			out = append(out, prefix...)
		}
		out = append(out, text[i])
		start = text[i] == '\n'
	}
	return string(out)
}

// ListedItems is how many items List names before it counts the rest.
const ListedItems = 3

// List names the first ListedItems items and counts the rest: "a, b, c and 4 more", as the
// rollout's messages and `rollout plan` name nodes, so that a message stays short on a large
// cluster.
func List(items []string) string {
	if len(items) <= ListedItems {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:ListedItems], ", "), len(items)-ListedItems)
}
