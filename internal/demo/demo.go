// Package demo runs `make demo`: it starts the embedded local control plane, applies the demo
// DaemonSets from testdata/demo with the real kubectl, waits for the real DaemonSet controller,
// scheduler and kwok kubelets to settle, and prints where each DaemonSet runs and why it does not
// run elsewhere. The cluster is then left up for exploration until the context is cancelled.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/daemonguard/daemonguard/internal/localcluster"
)

// Options configure a demo run.
type Options struct {
	Out       io.Writer
	Repo      string // checkout root; manifests come from Repo/testdata/demo
	ParentDir string // where the cluster folder goes; `make demo-down` reaps what is under it
	// Wait keeps the cluster running until ctx is cancelled (Ctrl-C). Tests turn it off.
	Wait bool
}

// Run runs the demo end to end.
func Run(ctx context.Context, opts Options) error {
	out := opts.Out
	if err := os.MkdirAll(opts.ParentDir, 0o755); err != nil {
		return err
	}
	c, err := localcluster.Start(ctx, localcluster.Config{ParentDir: opts.ParentDir, Log: out})
	if err != nil {
		return err
	}
	defer c.Stop()

	manifests := filepath.Join(opts.Repo, "testdata", "demo")
	fmt.Fprintf(out, "\n$ kubectl apply -f %s\n", manifests)
	apply := exec.CommandContext(ctx, "kubectl", "apply", "-f", manifests)
	apply.Env = c.Env()
	apply.Stdout, apply.Stderr = out, out
	if err := apply.Run(); err != nil {
		return fmt.Errorf("kubectl apply demo manifests: %w", err)
	}

	reports, err := settle(ctx, c.Client, 2*time.Minute)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := Render(out, reports); err != nil {
		return err
	}
	fmt.Fprintln(out, "Coming next: daemonguard's mutating webhook adds control-plane tolerations and a priorityClassName")
	fmt.Fprintln(out, "to DaemonSet templates (so nginx-ds covers 5 of 5 nodes), a Rego policy engine validates update")
	fmt.Fprintln(out, "strategies, and a rollout controller performs progressive, restart-safe rollouts.")

	if !opts.Wait {
		return nil
	}
	fmt.Fprintf(out, "\nThe cluster keeps running. In another terminal:\n  export KUBECONFIG=%s\n  kubectl get ds,pods -o wide\n", c.KubeconfigPath)
	fmt.Fprintln(out, "Press Ctrl-C to stop it (or run `make demo-down` from another terminal).")
	<-ctx.Done()
	fmt.Fprintln(out, "\nStopping the local cluster.")
	return nil
}

// settle waits until every DaemonSet in the cluster has observed its spec and has all its desired
// pods available, then reports on each.
func settle(ctx context.Context, client kubernetes.Interface, timeout time.Duration) ([]DaemonSetReport, error) {
	var reports []DaemonSetReport
	var pending string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		dsList, err := client.AppsV1().DaemonSets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pending = ""
		for i := range dsList.Items {
			if ds := &dsList.Items[i]; !settled(ds) {
				pending = ds.Namespace + "/" + ds.Name
				return false, nil
			}
		}
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		reports = reports[:0]
		for i := range dsList.Items {
			ds := &dsList.Items[i]
			pods, err := daemonSetPods(ctx, client, ds)
			if err != nil {
				return false, nil
			}
			reports = append(reports, BuildReport(ds, nodes.Items, pods))
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for DaemonSets to settle (still waiting for %s): %w", pending, err)
	}
	return reports, nil
}

func settled(ds *appsv1.DaemonSet) bool {
	s := ds.Status
	return s.ObservedGeneration >= ds.Generation &&
		s.DesiredNumberScheduled > 0 &&
		s.NumberAvailable == s.DesiredNumberScheduled &&
		s.UpdatedNumberScheduled == s.DesiredNumberScheduled
}

func daemonSetPods(ctx context.Context, client kubernetes.Interface, ds *appsv1.DaemonSet) ([]corev1.Pod, error) {
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, err
	}
	list, err := client.CoreV1().Pods(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, err
	}
	pods := list.Items[:0]
	for _, p := range list.Items {
		if metav1.IsControlledBy(&p, ds) {
			pods = append(pods, p)
		}
	}
	return pods, nil
}
