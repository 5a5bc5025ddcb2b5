// Command pause is the program of the local sandbox image (see package nodeimages), which
// containerd starts first in every pod to hold its namespaces: it waits for SIGTERM or SIGINT
// and exits 0. Unlike Kubernetes' pause it does not reap zombies, which only matters for pods
// that share their process namespace.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	// Said once the signals are caught, so whoever started pause knows a signal now stops it
	// cleanly rather than by the default action.
	fmt.Fprintln(os.Stderr, "Waiting for SIGTERM or SIGINT")
	sig := <-signals
	fmt.Fprintf(os.Stderr, "Stopped on %s\n", sig)
}
