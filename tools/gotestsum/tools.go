//go:build tools

// Package tools pins gotestsum, which runs `make test` and ends its output with the failed tests
// and what each printed, so the end of a long log names what failed.
package tools

import _ "gotest.tools/gotestsum"
