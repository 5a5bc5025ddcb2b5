// Package exitcode carries a process exit status from a command to main: a command that has
// already reported its outcome on stdout (a plan with a denial, a check that failed) returns an
// Error, and main exits with its Code without printing it. The whole package is this file.
package exitcode

import "fmt"

// Error carries a process exit code for an outcome already reported on stdout.
type Error struct{ Code int }

func (e Error) Error() string { return fmt.Sprintf("exit status %d", e.Code) }
