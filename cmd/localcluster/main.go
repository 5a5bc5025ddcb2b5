// Command localcluster is the developer tool behind `make demo`, `make cluster` and `make testbin`:
// it builds the test binaries and runs the embedded local control plane. It is not shipped.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/daemonguard/daemonguard/cmd/localcluster/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.New().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
