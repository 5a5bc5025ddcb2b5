package install

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// TestControllerLimitedToItsNamespaces installs the chart with controller.namespaces naming one
// namespace and runs the controller with the chart's arguments and ServiceAccount: it rolls out a
// managed DaemonSet there, and its ServiceAccount may neither read nor write DaemonSets and pods
// of another namespace (kubectl auth can-i as the ServiceAccount).
func TestControllerLimitedToItsNamespaces(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	listed := cluster.NewTestNamespace(t)
	other := listed + "-other"
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.CoreV1().Namespaces().Delete(ctx, other, metav1.DeleteOptions{}) })
	r := installChart(t, "dg-ns", "webhook.inProcessInjection=false", "controller.namespaces={"+listed+"}")
	r.runWebhook(r.webhookPort)
	waitAdmission(t, listed)
	sa := "system:serviceaccount:" + r.Namespace + ":" + r.Deployment(t, "controller").Spec.Template.Spec.ServiceAccountName

	canI := func(verb, resource, ns string) bool {
		t.Helper()
		out, _, err := cluster.Kubectl(ctx, "", "auth", "can-i", verb, resource, "-n", ns, "--as", sa)
		if err != nil && strings.TrimSpace(out) != "no" {
			t.Fatalf("kubectl auth can-i %s %s -n %s: %v (%q)", verb, resource, ns, err, out)
		}
		return strings.TrimSpace(out) == "yes"
	}
	for _, q := range []struct{ verb, resource string }{
		{"list", "daemonsets.apps"}, {"watch", "daemonsets.apps"}, {"patch", "daemonsets.apps"},
		{"patch", "daemonsets.apps/status"}, {"list", "controllerrevisions.apps"},
		{"list", "pods"}, {"delete", "pods"}, {"create", "events.events.k8s.io"},
	} {
		if !canI(q.verb, q.resource, listed) {
			t.Errorf("the controller may not %s %s in its namespace %s", q.verb, q.resource, listed)
		}
		if canI(q.verb, q.resource, other) {
			t.Errorf("the controller may %s %s in %s, a namespace controller.namespaces does not list", q.verb, q.resource, other)
		}
	}
	if canI("list", "daemonsets.apps", "") || !canI("list", "nodes", "") {
		t.Errorf("cluster-wide the controller may list DaemonSets %v and nodes %v, want nodes only", canI("list", "daemonsets.apps", ""), canI("list", "nodes", ""))
	}

	// The controller, with the chart's --namespaces and ServiceAccount, rolls out in its namespace.
	r.runComponent("controller")
	agent := toolbin.RepoPath(t, "testdata", "demo-rollout", "node-agent.yaml")
	clustertest.Kubectl(t, cluster, "", "apply", "-n", listed, "-f", agent)
	waitSettled(t, listed)
	clustertest.Kubectl(t, cluster, "", "-n", listed, "set", "image", "ds/node-agent", "agent=registry.example/node-agent:2.0")
	status := exec.Command(harness.Binary(t, cluster), "rollout", "status", "ds/node-agent", "-n", listed, "--timeout", "3m")
	status.Env = cluster.Env()
	if out, err := status.CombinedOutput(); err != nil {
		t.Fatalf("daemonguard rollout status: %v\n%s", err, fmt.Sprint(string(out)))
	}
}
