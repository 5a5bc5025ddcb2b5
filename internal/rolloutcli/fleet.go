package rolloutcli

// This file is `rollout status --contexts`: the DaemonSet read once in every kube context, side by
// side (FleetStatus, through preflight.EachContext, which `rollout plan --contexts` shares), one
// line per cluster (RenderFleetStatus) and the exit status (FleetStatusExit). A cluster's status
// is Evaluate's, the same as `rollout status --watch=false` reports for that cluster alone.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/daemonguard/daemonguard/internal/preflight"
)

// The exit statuses of `rollout status --contexts`: 1, as for one cluster, is a failed rollout
// (and a cluster that could not be read); exitFleetUnfinished is a fleet where nothing failed
// but some rollout is still under way, so that a script can tell "wait" from "done" and "stop".
const exitFleetUnfinished = 2

// ContextStatus is one cluster's line of a fleet status.
type ContextStatus struct {
	Context string
	// Revision is the controller-revision-hash of the DaemonSet's current template there; ""
	// when not known (the DaemonSet controller has not observed the template yet, or the
	// revisions could not be listed).
	Revision string
	Status   StatusReport
	// Err is why the cluster's DaemonSet could not be read (unreachable, forbidden, not found,
	// past --cluster-timeout); Status is then empty.
	Err error
}

// FleetStatus reads the DaemonSet name in every context of f (connectTo reaches one and gives
// its namespace) and evaluates it, one ContextStatus per context in f's order.
func FleetStatus(ctx context.Context, f preflight.Fleet, connectTo func(kubeContext string) (kubernetes.Interface, string, error), name string) []ContextStatus {
	outcomes := preflight.EachContext(ctx, f, func(ctx context.Context, kubeContext string) (ContextStatus, error) {
		c, ns, err := connectTo(kubeContext)
		if err != nil {
			return ContextStatus{}, err
		}
		ds, err := c.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return ContextStatus{}, fmt.Errorf("get daemon set %s/%s: %w", ns, name, err)
		}
		// As Watch does: a revision that cannot be found leaves Evaluate to take the rollout
		// controller's report as it is, and the line says the revision is unknown.
		hash, _ := FetchCurrentRevisionHash(ctx, c, ds)
		return ContextStatus{Revision: hash, Status: Evaluate(ds, hash)}, nil
	})
	rows := make([]ContextStatus, len(outcomes))
	for i, o := range outcomes {
		rows[i] = o.Value
		rows[i].Context, rows[i].Err = o.Context, o.Err
	}
	return rows
}

// RenderFleetStatus writes one line per cluster: context, revision, phase, updated/desired
// nodes, step and the status message (or the error), under a header.
func RenderFleetStatus(w io.Writer, rows []ContextStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CONTEXT\tREVISION\tPHASE\tUPDATED\tSTEP\tMESSAGE")
	for _, r := range rows {
		cells := fleetStatusCells(r)
		fmt.Fprintln(tw, strings.Join(cells[:], "\t"))
	}
	return tw.Flush()
}

// fleetStatusCells are a cluster's cells, each on one line: a message from annotations or
// conditions that holds a line break or a tab would break the table.
func fleetStatusCells(r ContextStatus) [6]string {
	oneLine := strings.NewReplacer("\n", " ", "\r", " ", "\t", " ").Replace
	if r.Err != nil {
		return [6]string{oneLine(r.Context), "-", "Error", "-", "-", oneLine(r.Err.Error())}
	}
	s := r.Status
	step := "-"
	if s.Step != "" {
		step = s.Step
		if s.StepSpec != "" {
			step += " (" + s.StepSpec + ")"
		}
	}
	return [6]string{oneLine(r.Context), first(r.Revision, "unknown"), string(s.Phase), fmt.Sprintf("%d/%d", s.Updated, s.Desired), oneLine(step), oneLine(s.Message)}
}

// FleetStatusExit is the exit status of a fleet status: 1 when some cluster's rollout failed or
// some cluster could not be read, exitFleetUnfinished when some rollout is not done, else 0.
func FleetStatusExit(rows []ContextStatus) int {
	code := 0
	for _, r := range rows {
		switch {
		case r.Err != nil || r.Status.Failed:
			return 1
		case !r.Status.Done:
			code = exitFleetUnfinished
		}
	}
	return code
}
