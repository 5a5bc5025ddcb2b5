package localcluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// RunTests is a TestMain body: it starts one cluster shared by the package's tests, hands it to
// use, runs the tests and always stops the cluster, also on SIGINT/SIGTERM. When tests fail the
// cluster folder (component logs included) is kept and its path printed. With -short no cluster
// is started and *use stays nil; tests that need one skip themselves.
//
//	var cluster *localcluster.Cluster
//	func TestMain(m *testing.M) { os.Exit(localcluster.RunTests(m, localcluster.Config{}, &cluster)) }
func RunTests(m *testing.M, cfg Config, use **Cluster) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	// The first cold build of the control plane can take long on a 2-core machine; tests start
	// after it, so it is not charged to any test's deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	c, err := Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "local cluster: %v\n", err)
		return 1
	}
	*use = c

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "local cluster: %v received, stopping (logs kept in %s)\n", sig, c.Dir)
		c.StopKeepLogs()
		os.Exit(130)
	}()

	code := m.Run()
	signal.Stop(signals)
	if code != 0 {
		c.StopKeepLogs()
		fmt.Fprintf(os.Stderr, "local cluster: tests failed; component logs kept in %s/logs\n", c.Dir)
		return code
	}
	c.Stop()
	return code
}
