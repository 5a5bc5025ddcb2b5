// Command testbin builds, or finds cached, the binaries of the pinned tools modules that the tests,
// the demo and the local cluster run (internal/toolbin). It imports nothing else, so on a cold
// machine `make demo` starts building the control plane after seconds instead of first compiling
// the whole test bench. It is not shipped.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// setsFlag collects --set, which may be repeated.
type setsFlag []string

func (s *setsFlag) String() string { return strings.Join(*s, ",") }

func (s *setsFlag) Set(v string) error {
	*s = append(*s, v)
	return nil
}

func main() {
	var sets setsFlag
	flag.Var(&sets, "set", "a tool set to build: "+strings.Join(toolbin.ToolSetNames, ", ")+" (repeatable)")
	printPath := flag.String("print", "", "a binary whose path to print on standard output once built (the Makefile runs gotestsum so)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: testbin [--set NAME]... [--print BINARY] [BINARY...]\nBuilds (or finds cached) the named sets and binaries; every tool when none is named.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	names := flag.Args()
	if *printPath != "" {
		names = append(names, *printPath)
	}
	bins, err := toolbin.Build(ctx, os.Stderr, sets, names)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	if *printPath != "" {
		fmt.Println(bins.Path(*printPath))
	}
}
