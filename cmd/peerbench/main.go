// Command peerbench measures daemonguard's validating webhook against a null webhook and
// Gatekeeper under the same open-loop load and prints the results as Markdown (test/peerbench;
// `make bench-peers`, docs/performance.md).
//
//	go run ./cmd/peerbench -rates 250,500,1000 -duration 10s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/daemonguard/daemonguard/test/loadgen"
	"github.com/daemonguard/daemonguard/test/peerbench"
)

func main() {
	loadgen.ServeChildIfAsked() // a webhook process this command started: serves, never returns
	cfg, err := peerbench.ParseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peerbench:", err)
		os.Exit(1)
	}
}

func run(cfg peerbench.Config) error {
	loadgen.SetWebhookLogging()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Progress = os.Stderr
	rep, err := peerbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return rep.WriteMarkdown(os.Stdout)
}
