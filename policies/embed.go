// Package policies embeds daemonguard's built-in Rego policies and their default parameters.
// Each policy lives in its own folder as NAME/NAME.rego with NAME_test.rego beside it; shared
// helpers are in lib/. See README.md for the input document, the data and the rule contract.
package policies

import "embed"

// Files holds every built-in .rego file (tests included, so `daemonguard policy test` and
// `go test` run the same suite) and parameters.yaml, the default parameters.
//
//go:embed */*.rego parameters.yaml
var Files embed.FS
