package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daemonguard/daemonguard/controller/rollout"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Controller is a rollout controller running in this process against a local cluster.
type Controller struct {
	stop context.CancelFunc
	done chan error
}

// ControllerOptions tune the controller the harness starts.
type ControllerOptions struct {
	// Namespaces limits the controller to these namespaces (--namespaces); empty watches all.
	Namespaces []string
	// Prometheus is where the controller measures analysis gates.
	Prometheus promquery.Options
}

// StartController starts the rollout controller with leader election (its Lease lives in
// WebhookNamespace), logging to <cluster dir>/logs/daemonguard-controller.log.
func StartController(ctx context.Context, c *localcluster.Cluster) (*Controller, error) {
	return StartControllerWith(ctx, c, ControllerOptions{})
}

// StartControllerWith is StartController with options.
func StartControllerWith(ctx context.Context, c *localcluster.Cluster, opts ControllerOptions) (*Controller, error) {
	if err := c.CreateNamespace(ctx, WebhookNamespace); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(c.Dir, "logs", "daemonguard-controller.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	log := zap.New(zap.WriteTo(logFile))
	ctrl.SetLogger(log) // controller-runtime's global logger; the first component started wins
	runCtx, cancel := context.WithCancel(context.Background())
	ctl := &Controller{stop: cancel, done: make(chan error, 1)}
	go func() {
		defer logFile.Close()
		ctl.done <- rollout.Run(runCtx, rollout.Options{
			RESTConfig: c.RESTConfig, MetricsAddr: "0", HealthAddr: "0",
			LeaderElection: true, LeaderElectionNamespace: WebhookNamespace,
			Namespaces: opts.Namespaces, Log: log, Prometheus: opts.Prometheus,
			// Reads everything only when it must: an event the controller missed shows as a
			// stuck rollout or a budget breach instead of being repaired by the next read.
			FullReadInterval: -1,
		})
	}()
	return ctl, nil
}

// Running returns nil while the controller runs, and an error with what Run returned once it
// has stopped on its own.
func (c *Controller) Running() error {
	return running("rollout controller", c.done)
}

// running reads done without consuming it: nil while the component runs.
func running(what string, done chan error) error {
	select {
	case err := <-done:
		done <- err
		return fmt.Errorf("the %s stopped: %v", what, err)
	default:
		return nil
	}
}

// Stop stops the controller the way a pod is stopped (context cancelled, Lease released) and
// returns what Run returned.
func (c *Controller) Stop() error {
	c.stop()
	return <-c.done
}
