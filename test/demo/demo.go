// Package demo runs `make demo`: it starts the embedded local control plane and daemonguard's
// admission webhook against it, applies the demo DaemonSets from testdata/demo with the real
// kubectl, waits for the real DaemonSet controller, scheduler and kwok kubelets to settle, and
// prints where each DaemonSet runs, what daemonguard injected, and how its policies deny and warn.
// The cluster is then left up for exploration until the context is cancelled.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// Options configure a demo run.
type Options struct {
	Out       io.Writer
	Repo      string // checkout root; manifests come from Repo/testdata/demo
	ParentDir string // where the cluster folder goes; `make demo-down` reaps what is under it
	// Wait keeps the cluster running until ctx is cancelled (Ctrl-C). Tests turn it off.
	Wait bool
	// RealNode runs the control-plane node as a real node (localcluster.Config.RealNode), with the
	// seed DaemonSet on the node-agent image (see realnode.go).
	RealNode bool
}

// Run runs the demo end to end.
func Run(ctx context.Context, opts Options) error {
	out := opts.Out
	if err := os.MkdirAll(opts.ParentDir, 0o755); err != nil {
		return err
	}
	c, err := localcluster.Start(ctx, localcluster.Config{ParentDir: opts.ParentDir, Log: out, RealNode: opts.RealNode})
	if err != nil {
		return err
	}
	defer c.Stop()

	hook, err := harness.StartWebhook(ctx, c, harness.Options{AuditInterval: time.Minute})
	if err != nil {
		return err
	}
	defer hook.Stop()
	fmt.Fprintf(out, "daemonguard webhook serving at %s, registered as MutatingWebhookConfiguration and ValidatingWebhookConfiguration \"daemonguard\"\n", hook.URL)

	seed, err := seedManifest(filepath.Join(opts.Repo, "testdata", "demo", "nginx-ds.yaml"), opts.RealNode)
	if err != nil {
		return err
	}
	if opts.RealNode {
		fmt.Fprintf(out, "\n%s is a real node (kubelet, containerd, runc, CNI, kube-proxy): nothing can be pulled there, so the seed\n"+
			"DaemonSet runs the node-agent image built in this checkout (%s) instead of nginx:1.7.9, and its pod on\n"+
			"%s is a real container. The rollout and policy DaemonSets stay on the kwok nodes.\n", c.RealNodeName(), nodeimages.AgentV1, c.RealNodeName())
	}
	// Injection is for node agents an administrator named: the demo's DaemonSets run in default,
	// so the demo marks it, as a cluster admin does a monitoring or CNI namespace.
	fmt.Fprintf(out, "\nInjection applies only in namespaces an administrator marks for node agents (%s=true):", admission.NodeAgentsLabel)
	if _, err := kubectl(ctx, c, out, "label", "namespace", "default", admission.NodeAgentsLabel+"=true"); err != nil {
		return err
	}
	if _, err := applyManifest(ctx, c, out, "testdata/demo/nginx-ds.yaml", seed); err != nil {
		return err
	}
	reports, err := settle(ctx, c.Client, 2*time.Minute)
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := Render(out, reports); err != nil {
		return err
	}

	fmt.Fprintln(out, "Policies at admission (built-in Rego, see policies/README.md):")
	policyDir := filepath.Join(opts.Repo, "testdata", "demo-policy")
	if _, err := kubectl(ctx, c, out, "apply", "-f", filepath.Join(policyDir, "wide-budget.yaml")); err == nil {
		return fmt.Errorf("the wide-budget DaemonSet was admitted; the rolling_update_budget policy should deny it")
	}
	onDelete, err := kwokOnlyManifest(filepath.Join(policyDir, "on-delete.yaml"), opts.RealNode)
	if err != nil {
		return err
	}
	if _, err := applyManifest(ctx, c, out, "testdata/demo-policy/on-delete.yaml", onDelete); err != nil {
		return err
	}
	if err := rolloutDemo(ctx, c, out, opts.Repo, opts.RealNode); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nTo run daemonguard in a cluster: the Helm chart charts/daemonguard (TLS from cert-manager or self-managed),\nand Rego synced from git by Argo CD: see Install in README.md and charts/daemonguard/README.md.")

	if !opts.Wait {
		return nil
	}
	fmt.Fprintf(out, "\nThe cluster keeps running. In another terminal:\n  export KUBECONFIG=%s\n  kubectl get ds,pods -o wide\n", c.KubeconfigPath)
	fmt.Fprintln(out, "Press Ctrl-C to stop it (or run `make demo-down` from another terminal).")
	<-ctx.Done()
	fmt.Fprintln(out, "\nStopping the local cluster.")
	return nil
}

// rolloutDemo shows a managed rollout: a canary node, a timed pause, the rest one node at a time;
// then the seed's failing image halting the rollout after one node, and a roll forward.
func rolloutDemo(ctx context.Context, c *localcluster.Cluster, out io.Writer, repo string, realNode bool) error {
	fmt.Fprintln(out, "\nProgressive rollout by daemonguard's rollout controller (see docs/rollouts.md):")
	ctl, err := harness.StartController(ctx, c)
	if err != nil {
		return err
	}
	defer func() { _ = ctl.Stop() }()
	agent, err := kwokOnlyManifest(filepath.Join(repo, "testdata", "demo-rollout", "node-agent.yaml"), realNode)
	if err != nil {
		return err
	}
	if _, err := applyManifest(ctx, c, out, "testdata/demo-rollout/node-agent.yaml", agent); err != nil {
		return err
	}
	steps := []struct {
		tool     string
		args     []string
		wantFail bool
	}{
		{"daemonguard", []string{"rollout", "status", "ds/node-agent", "--timeout=2m"}, false},
		{"kubectl", []string{"set", "image", "ds/node-agent", "agent=nginx:1.26.0"}, false},
		{"daemonguard", []string{"rollout", "status", "ds/node-agent", "--timeout=2m"}, false},
		// nginx:1.91 is the seed's failing image; kwok's kubelet cannot pull it.
		{"kubectl", []string{"set", "image", "ds/node-agent", "agent=nginx:1.91"}, false},
		{"daemonguard", []string{"rollout", "status", "ds/node-agent", "--timeout=2m"}, true},
		{"kubectl", []string{"set", "image", "ds/node-agent", "agent=nginx:1.26.1"}, false},
		{"daemonguard", []string{"rollout", "status", "ds/node-agent", "--timeout=2m"}, false},
		{"daemonguard", []string{"rollout", "history", "ds/node-agent"}, false},
	}
	for _, st := range steps {
		var err error
		if st.tool == "kubectl" {
			_, err = kubectl(ctx, c, out, st.args...)
		} else {
			err = daemonguard(ctx, c, out, st.args...)
		}
		if st.wantFail && err == nil {
			return fmt.Errorf("daemonguard %s succeeded; the rollout of nginx:1.91 should have failed", strings.Join(st.args, " "))
		}
		if !st.wantFail && err != nil {
			return fmt.Errorf("%s %s: %w", st.tool, strings.Join(st.args, " "), err)
		}
	}
	return nil
}

// daemonguard runs the daemonguard CLI in this process against the cluster, echoed like kubectl.
func daemonguard(ctx context.Context, c *localcluster.Cluster, out io.Writer, args ...string) error {
	fmt.Fprintf(out, "\n$ daemonguard %s\n", strings.Join(args, " "))
	cmd := cli.New()
	cmd.SetArgs(append(args, "--kubeconfig", c.KubeconfigPath))
	cmd.SetOut(out)
	cmd.SetErr(out)
	err := cmd.ExecuteContext(ctx)
	if err != nil && !cli.IsReported(err) {
		fmt.Fprintln(out, "error:", err)
	}
	return err
}

// kubectl runs the real kubectl against the cluster, echoing the command and its output the way a
// person would see them in a terminal.
func kubectl(ctx context.Context, c *localcluster.Cluster, out io.Writer, args ...string) (string, error) {
	fmt.Fprintf(out, "\n$ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = c.Env()
	var buf strings.Builder
	cmd.Stdout = io.MultiWriter(out, &buf)
	cmd.Stderr = io.MultiWriter(out, &buf)
	err := cmd.Run()
	return buf.String(), err
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
