// Command kubectl-daemonguard is daemonguard's CLI as a kubectl plugin: installed on the PATH, it
// runs as `kubectl daemonguard ...` (e.g. `kubectl daemonguard rollout status ds/node-agent`). It
// is the same command tree as the daemonguard binary; this file only wires signals to it.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/daemonguard/daemonguard/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := cli.New()
	root.Use = "kubectl daemonguard"
	// Help and usage show "kubectl daemonguard ...", not the first word of Use alone.
	if root.Annotations == nil {
		root.Annotations = map[string]string{}
	}
	root.Annotations[cobra.CommandDisplayNameAnnotation] = "kubectl daemonguard"
	if err := root.ExecuteContext(ctx); err != nil {
		if !cli.IsReported(err) {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(cli.ExitCode(err))
	}
}
