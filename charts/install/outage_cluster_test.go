package install

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
)

// TestNodeAgentsStartWhileDaemonguardIsDown installs the chart (URL mode, self-managed TLS),
// admits the seed DaemonSet, then stops every webhook replica. With the default failurePolicy Fail
// and after a helm upgrade to Ignore, a deleted DaemonSet pod is recreated on its node and becomes
// Ready (the pod webhook fails open); DaemonSet writes are rejected (Fail) or admitted unchanged
// (Ignore), as values.yaml documents. When the webhook returns, admission mutates again and an
// update of a DaemonSet admitted unchanged meanwhile gets the injection.
func TestNodeAgentsStartWhileDaemonguardIsDown(t *testing.T) {
	ctx := context.Background()
	// The webhook path: with in-process injection (auto on Kubernetes 1.36) the API server itself
	// would inject while the webhook is down, which internal/inprocess tests.
	r := installChart(t, "dg-outage", "webhook.inProcessInjection=false")
	replica := r.runWebhook(r.webhookPort)
	ns := cluster.NewTestNamespace(t)
	waitAdmission(t, ns)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", clustertest.SeedManifest(t))
	// A managed rollout, started while the webhook is up and in flight when it stops: the canary
	// step's pause holds it until well after the stop.
	r.runComponent("controller")
	agent := toolbin.RepoPath(t, "testdata", "demo-rollout", "node-agent.yaml")
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", agent)
	waitSettled(t, ns)
	rollout := []byte(`{"metadata":{"annotations":{"daemonguard.io/steps":"1,pause:20s,100%"}},"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"registry.example/node-agent:2.0"}]}}}}`)
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Patch(ctx, "node-agent", types.StrategicMergePatchType, rollout, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	replica.Proc.Stop()
	cluster.WaitFor(t, time.Minute, "the API server fails to reach the stopped webhook", func(ctx context.Context) (bool, string) {
		_, err := dryRunDaemonSet(ctx, cluster.Client, ns, "probe")
		return err != nil && strings.Contains(err.Error(), "failed calling webhook"), fmt.Sprint(err)
	})

	t.Run("failurePolicy Fail", func(t *testing.T) {
		t.Run("a managed rollout in flight completes", func(t *testing.T) {
			ds := clustertest.WaitDaemonSet(t, cluster, ns, "node-agent", time.Minute, "the DaemonSet controller observes the new template", func(ds *appsv1.DaemonSet) (bool, string) {
				return ds.Status.ObservedGeneration == ds.Generation, fmt.Sprintf("observed %d of %d", ds.Status.ObservedGeneration, ds.Generation)
			})
			if st := ds.Status; st.UpdatedNumberScheduled >= st.DesiredNumberScheduled {
				t.Fatalf("the rollout was complete before the webhook stopped (%+v); the test proves nothing", st)
			}
			status := exec.Command(harness.Binary(t, cluster), "rollout", "status", "ds/node-agent", "-n", ns, "--timeout", "3m")
			status.Env = cluster.Env()
			if out, err := status.CombinedOutput(); err != nil {
				t.Fatalf("daemonguard rollout status: %v\n%s", err, out)
			}
		})
		t.Run("a deleted DaemonSet pod is recreated and Ready", func(t *testing.T) { assertPodRecreated(t, ns, "nginx-ds") })
		t.Run("DaemonSet writes are rejected, naming the webhook", func(t *testing.T) {
			_, err := dryRunDaemonSet(ctx, cluster.Client, ns, "while-down")
			if err == nil || !strings.Contains(err.Error(), "daemonsets.mutate.daemonguard.io") {
				t.Errorf("a DaemonSet create while daemonguard is down with failurePolicy Fail: %v, want a rejection naming the webhook", err)
			}
		})
	})

	r.helm("upgrade", r.Name, chartDir(t), "--namespace", r.Namespace, "--reuse-values", "--wait", "--timeout", "3m",
		"--set", "webhook.failurePolicy=Ignore")
	t.Run("failurePolicy Ignore", func(t *testing.T) {
		t.Run("a deleted DaemonSet pod is recreated and Ready", func(t *testing.T) { assertPodRecreated(t, ns, "nginx-ds") })
		t.Run("DaemonSet writes are admitted unchanged", func(t *testing.T) {
			ds, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, agentDaemonSet("while-down"), metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("a DaemonSet create while daemonguard is down with failurePolicy Ignore: %v", err)
			}
			if pc := ds.Spec.Template.Spec.PriorityClassName; pc != "" || len(ds.Spec.Template.Spec.Tolerations) != 0 {
				t.Errorf("stored with priorityClassName %q and tolerations %v while the webhook was down", pc, ds.Spec.Template.Spec.Tolerations)
			}
		})
	})

	t.Run("the webhook returns", func(t *testing.T) {
		// On a new port, re-pointed by helm: the old one was free through the outage, and a
		// process of another test package may have taken it meanwhile.
		r := r.in(t)
		r.webhookPort = harness.FreePort(t)
		r.helm("upgrade", r.Name, chartDir(t), "--namespace", r.Namespace, "--reuse-values", "--wait", "--timeout", "3m",
			"--set", "webhook.url=https://127.0.0.1:"+strconv.Itoa(r.webhookPort))
		r.runWebhook(r.webhookPort)
		waitAdmission(t, ns)
		patch := []byte(`{"metadata":{"annotations":{"example.com/touched":"after-outage"}}}`)
		ds, err := cluster.Client.AppsV1().DaemonSets(ns).Patch(ctx, "while-down", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if ds.Spec.Template.Spec.PriorityClassName == "" || !hasToleration(ds.Spec.Template.Spec.Tolerations, "node-role.kubernetes.io/control-plane") {
			t.Errorf("the first update after the outage was not injected: %+v", ds.Spec.Template.Spec)
		}
		assertPodRecreated(t, ns, "nginx-ds")
	})
}

// assertPodRecreated deletes one pod of the DaemonSet and waits until the DaemonSet controller has
// created its replacement on the same node and the replacement is Ready.
func assertPodRecreated(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("pods of %s: %v (%d)", name, err, len(pods.Items))
	}
	victim := pods.Items[0]
	if err := cluster.Client.CoreV1().Pods(ns).Delete(ctx, victim.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, 2*time.Minute, "a Ready replacement of "+victim.Name+" on "+victim.Spec.NodeName, func(ctx context.Context) (bool, string) {
		pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(ds.Spec.Selector)})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.UID != victim.UID && p.Spec.NodeName == victim.Spec.NodeName && p.DeletionTimestamp == nil && clustertest.PodReady(&p) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods, none a Ready replacement", len(pods.Items))
	})
}

// agentDaemonSet is a minimal DaemonSet with nothing injected.
func agentDaemonSet(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}},
			},
		},
	}
}
