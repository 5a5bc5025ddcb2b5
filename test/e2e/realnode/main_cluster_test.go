package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

var cluster *localcluster.Cluster

// realNode is the cluster's real node: the control-plane node, labelled and tainted as kubeadm
// does, so the chart's pods and the node agents meet the taint a real control plane has.
const realNode = "control-plane-0"

// The kwok nodes beside it. Two more control-plane nodes make an HA control plane of three,
// of which the real one comes first in the rollout controller's order (control-plane nodes by
// name): a DaemonSet for the control plane has its canary on the real node, where a real kubelet
// runs (and crash-loops) the new version. The workers show the seed DaemonSet on every node.
func clusterNodes() []localcluster.Node {
	return append([]localcluster.Node{
		localcluster.ControlPlaneNode(realNode),
		localcluster.ControlPlaneNode("control-plane-1"),
		localcluster.ControlPlaneNode("control-plane-2"),
	}, localcluster.WorkerNodes("worker", 2)...)
}

func TestMain(m *testing.M) {
	if localcluster.MissingRealNodeDeps() != "" {
		// No cluster: every test skips, naming what is missing (needRealNode).
		os.Exit(m.Run())
	}
	os.Exit(localcluster.RunTests(m, localcluster.Config{Nodes: clusterNodes(), RealNode: true}, &cluster))
}

// needRealNode skips the test without the local cluster or its real node.
func needRealNode(t *testing.T) {
	t.Helper()
	localcluster.NeedCluster(t)
	localcluster.NeedRealNode(t)
	if cluster == nil {
		t.Skip("the local cluster did not start")
	}
	if got := cluster.RealNodeName(); got != realNode {
		t.Fatalf("the cluster's real node is %q, want %s", got, realNode)
	}
}

// daemonguardCLI runs the daemonguard binary built from this checkout, as a user runs it.
func daemonguardCLI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cluster.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("daemonguard %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func hasToleration(ts []corev1.Toleration, key string) bool {
	for _, t := range ts {
		if t.Key == key && (t.Operator == corev1.TolerationOpExists || t.Operator == "") {
			return true
		}
	}
	return false
}

// listPods lists the pods of ns matching selector.
func listPods(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	list, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// since formats the time since start for the log, rounded for a person.
func since(start time.Time) string {
	return fmt.Sprint(time.Since(start).Round(100 * time.Millisecond))
}
