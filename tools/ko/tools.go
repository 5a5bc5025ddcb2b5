//go:build tools

// Package tools pins ko, which builds the daemonguard image without a container engine.
package tools

import _ "github.com/google/ko"
