// Package kubetext bounds the free text daemonguard writes into Kubernetes objects (annotation
// values, report descriptions), whose size the API server and etcd limit.
package kubetext

import "unicode/utf8"

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
