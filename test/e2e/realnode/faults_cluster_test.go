package realnode

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/nodeimages"
	"github.com/daemonguard/daemonguard/test/webhookreg"
)

// testFaults breaks what the chart runs on, for real, with DaemonSet writes flowing, and counts
// what every write got.
func testFaults(t *testing.T, a *artifacts, in *installed) {
	image := in.build.pinned()
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, seedDaemonSet(t, nodeimages.AgentV1), "apply", "-n", ns, "-f", "-")

	t.Run("a deleted webhook pod leaves admission to the other replica", func(t *testing.T) {
		webhooks, _ := waitChartPods(t, image)
		load := startWrites(t, 2)
		start := time.Now()
		if err := cluster.Client.CoreV1().Pods(releaseNamespace).Delete(context.Background(), webhooks[0].Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitChartPods(t, image)
		t.Logf("webhook pod %s deleted; two webhook pods Ready again %s later", webhooks[0].Name, since(start))
		load.finish(t, "the deletion of a webhook pod")
	})

	t.Run("the containers serve through a kubelet restart and the pods are Ready again", func(t *testing.T) {
		webhooks, controllers := waitChartPods(t, image)
		before := containerIDs(append(webhooks, controllers...))
		load := startWrites(t, 2)
		start := time.Now()
		if err := cluster.StopComponent("kubelet"); err != nil {
			t.Fatal(err)
		}
		// Containers do not depend on the kubelet: admission goes on while it is away.
		load.waitAdmitted(t, 20, "writes admitted while the kubelet is stopped")
		stopped := since(start)
		if err := cluster.StartComponent(context.Background(), "kubelet"); err != nil {
			t.Fatal(err)
		}
		restarted := time.Now()
		cluster.WaitFor(t, time.Minute, "the restarted kubelet renews its node lease", func(ctx context.Context) (bool, string) {
			l, err := cluster.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, realNode, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return l.Spec.RenewTime != nil && l.Spec.RenewTime.After(restarted.Add(-time.Second)), fmt.Sprintf("renewed %v", l.Spec.RenewTime)
		})
		waitProbedSinceRestart(t, append(webhooks, controllers...))
		webhooks, controllers = waitChartPods(t, image)
		waitSeedReady(t, ns)
		t.Logf("kubelet stopped for %s; the chart's pods and the seed's pod Ready again %s after the stop", stopped, since(start))
		if after := containerIDs(append(webhooks, controllers...)); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("the chart's containers changed across the kubelet restart: %v, then %v", before, after)
		}
		load.finish(t, "the kubelet restart")
	})

	t.Run("a drain of the real node is held by the webhook PodDisruptionBudget", func(t *testing.T) {
		waitChartPods(t, image)
		load := startWrites(t, 2)
		out, stderr, err := cluster.Kubectl(context.Background(), "", "drain", realNode, "--ignore-daemonsets",
			"--delete-emptydir-data", "--timeout=12s")
		t.Cleanup(func() { _, _, _ = cluster.Kubectl(context.Background(), "", "uncordon", realNode) })
		if err == nil {
			t.Fatalf("kubectl drain %s succeeded; the PodDisruptionBudget should have kept the last webhook pod:\n%s", realNode, out)
		}
		const pdbRefusal = "Cannot evict pod as it would violate the pod's disruption budget"
		if !strings.Contains(stderr, pdbRefusal) || !strings.Contains(stderr, fullname+"-webhook-") {
			t.Errorf("kubectl drain did not report the webhook's disruption budget (%q):\n%s%s", pdbRefusal, out, stderr)
		}
		ready, err := readyPods(context.Background(), component("webhook"), image)
		if err != nil || len(ready) != 1 {
			t.Errorf("after the drain: %d Ready webhook pods (%v), want exactly the one the budget kept", len(ready), err)
		}
		load.waitAdmitted(t, 20, "writes admitted by the one webhook pod left")
		clustertest.Kubectl(t, cluster, "", "uncordon", realNode)
		waitChartPods(t, image)
		load.finish(t, "the drain")
	})

	t.Run("with every webhook replica gone", func(t *testing.T) {
		ctx := context.Background()
		clustertest.Kubectl(t, cluster, "", "scale", "-n", releaseNamespace, "deployment/"+fullname+"-webhook", "--replicas=0")
		cluster.WaitFor(t, 2*time.Minute, "no webhook pod left", func(ctx context.Context) (bool, string) {
			pods, err := listPods(ctx, releaseNamespace, component("webhook"))
			return err == nil && len(pods) == 0, fmt.Sprintf("%d webhook pods", len(pods))
		})
		t.Cleanup(func() {
			_, _, _ = cluster.Kubectl(ctx, "", "scale", "-n", releaseNamespace, "deployment/"+fullname+"-webhook", "--replicas=2")
		})
		t.Run("a DaemonSet pod is recreated and its container runs as the pod webhook fails open", func(t *testing.T) {
			replaceSeedPod(t, ns)
		})
		t.Run("with failurePolicy Fail a DaemonSet write is rejected naming the webhook", func(t *testing.T) {
			_, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, inertDaemonSet("while-down"), metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), "failed calling webhook") || !strings.Contains(err.Error(), "daemonsets.validate.daemonguard.io") {
				t.Errorf("a DaemonSet create with no webhook replica: %v, want a rejection naming daemonsets.validate.daemonguard.io", err)
			}
		})
		t.Run("with failurePolicy Ignore a DaemonSet write is admitted and injected in-process", func(t *testing.T) {
			in.upgrade(t, "--set", "webhook.failurePolicy=Ignore")
			ds, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, inertDaemonSet("while-down"), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("a DaemonSet create with no webhook replica and failurePolicy Ignore: %v", err)
			}
			if !injected(ds) {
				t.Errorf("admitted without the injection the API server makes in-process: %+v", ds.Spec.Template.Spec)
			}
		})
		in.upgrade(t)
		clustertest.Kubectl(t, cluster, "", "scale", "-n", releaseNamespace, "deployment/"+fullname+"-webhook", "--replicas=2")
		waitChartPods(t, image)
		load := startWrites(t, 2)
		load.finish(t, "the return of the webhook")
	})
}

// waitProbedSinceRestart waits until the restarted kubelet has passed a readiness probe of every
// pod: until then it holds each container not Ready, and it may post that status after the pods
// already read Ready from before the restart, so a later subtest would meet a replica that leaves
// the webhook Service's endpoints (both at once, in a drain). The kubelet's probe counters
// (/metrics/probes, read through the API server's node proxy) start again with the process.
func waitProbedSinceRestart(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, "the restarted kubelet passes a readiness probe of every chart pod", func(ctx context.Context) (bool, string) {
		raw, err := cluster.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", realNode, "proxy/metrics/probes").DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		families, err := webhookreg.ParseMetrics(bytes.NewReader(raw))
		if err != nil {
			return false, err.Error()
		}
		passed := map[string]bool{}
		if f := families["prober_probe_total"]; f != nil {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["probe_type"] == "Readiness" && labels["result"] == "successful" && m.GetCounter().GetValue() > 0 {
					passed[labels["namespace"]+"/"+labels["pod"]] = true
				}
			}
		}
		for _, p := range pods {
			if !passed[p.Namespace+"/"+p.Name] {
				return false, "no readiness probe of " + p.Name + " passed since the restart"
			}
		}
		return true, ""
	})
}

// upgrade runs helm upgrade of the installed chart version with the install's values and sets:
// a change of values, not of version. The webhook Deployment's replica count is left as it is
// (helm patches only what the chart changed).
func (in *installed) upgrade(t *testing.T, sets ...string) {
	t.Helper()
	args := append([]string{"upgrade", releaseName, in.build.chart.Ref, "--version", in.build.chart.Version, "--plain-http",
		"--namespace", releaseNamespace, "-f", in.values}, sets...)
	in.a.mustHelm(t, args...)
}

// containerIDs lists the containers of pods by pod name, for telling a restart apart.
func containerIDs(pods []corev1.Pod) map[string]string {
	ids := map[string]string{}
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			ids[p.Name+"/"+cs.Name] = cs.ContainerID
		}
	}
	return ids
}

// waitSeedReady waits until the seed DaemonSet's pod on the real node is Ready.
func waitSeedReady(t *testing.T, ns string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	cluster.WaitFor(t, 2*time.Minute, "the seed's pod Ready on "+realNode, func(ctx context.Context) (bool, string) {
		pods, err := listPods(ctx, ns, "app=nginx-ds")
		if err != nil {
			return false, err.Error()
		}
		for i := range pods {
			if pods[i].Spec.NodeName == realNode && pods[i].DeletionTimestamp == nil && clustertest.PodReady(&pods[i]) {
				pod = &pods[i]
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods, none Ready on %s", len(pods), realNode)
	})
	return pod
}

// replaceSeedPod deletes the seed's pod on the real node and waits until the DaemonSet controller's
// replacement runs there, with a container the kubelet started.
func replaceSeedPod(t *testing.T, ns string) {
	t.Helper()
	victim := waitSeedReady(t, ns)
	start := time.Now()
	if err := cluster.Client.CoreV1().Pods(ns).Delete(context.Background(), victim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 2*time.Minute, "a Ready replacement of "+victim.Name, func(ctx context.Context) (bool, string) {
		pods, err := listPods(ctx, ns, "app=nginx-ds")
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods {
			if p.UID != victim.UID && p.Spec.NodeName == realNode && clustertest.PodReady(&p) && p.Status.ContainerStatuses[0].State.Running != nil {
				return true, ""
			}
		}
		return false, "no Ready replacement yet"
	})
	t.Logf("seed pod %s on %s deleted; its replacement's container runs %s later", victim.Name, realNode, since(start))
}
