//go:build tools

// Package tools pins Gatekeeper for the peer benchmark (test/peerbench).
package tools

import _ "github.com/open-policy-agent/gatekeeper/v3"
