package localcluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// cluster is shared by the tests of this package: 1 tainted control-plane node + 4 workers.
var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Config{}, &cluster))
}

// waitRolledOut waits until the DaemonSet has observed its spec and every desired pod is updated
// and available, and returns it.
func waitRolledOut(t *testing.T, ns, name string, desired int32) *appsv1.DaemonSet {
	t.Helper()
	return clustertest.WaitDaemonSet(t, cluster, ns, name, 2*time.Minute, "DaemonSet "+name+" rolled out", func(ds *appsv1.DaemonSet) (bool, string) {
		s := ds.Status
		return s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled == desired &&
				s.CurrentNumberScheduled == desired && s.NumberReady == desired &&
				s.UpdatedNumberScheduled == desired && s.NumberAvailable == desired && s.NumberMisscheduled == 0,
			fmt.Sprintf("%+v", s)
	})
}

func podsOf(t *testing.T, ns string, selector string) []corev1.Pod {
	t.Helper()
	list, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// podReady is a Running pod whose Ready condition is True.
func podReady(p *corev1.Pod) bool {
	return clustertest.PodReady(p) && p.Status.Phase == corev1.PodRunning
}

func TestSeedDaemonSetRunsOnEveryUntaintedNode(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", clustertest.SeedManifest(t))
	waitRolledOut(t, ns, "nginx-ds", 4)

	pods := podsOf(t, ns, "app=nginx-ds")
	onNode := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		if !podReady(p) {
			t.Errorf("pod %s on %s is %s, not Running and Ready", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
		onNode[p.Spec.NodeName] = true
	}
	for _, n := range localcluster.DefaultNodes() {
		tainted := len(n.Taints) > 0
		if onNode[n.Name] == tainted {
			t.Errorf("node %s (tainted: %v) has pod: %v", n.Name, tainted, onNode[n.Name])
		}
	}
	if len(pods) != 4 {
		t.Errorf("got %d pods, want 4", len(pods))
	}

	// What a person sees: every status column of `kubectl get ds` reads 4.
	out := clustertest.Kubectl(t, cluster, "", "get", "ds", "nginx-ds", "-n", ns)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("unexpected kubectl get ds output:\n%s", out)
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	for i, col := range header {
		switch col {
		case "DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE":
			if i >= len(row) || row[i] != "4" {
				t.Errorf("column %s reads %q, want 4:\n%s", col, row[i], out)
			}
		}
	}
}

func TestNodeLifecycleAddsAndRemovesDaemonPods(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", clustertest.SeedManifest(t))
	waitRolledOut(t, ns, "nginx-ds", 4)

	ctx := context.Background()
	late := localcluster.Node{Name: "late-worker", Labels: map[string]string{localcluster.ZoneLabel: "zone-c"}}
	if err := cluster.AddNodes(ctx, late); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.DeleteNode(context.Background(), late.Name) })

	cluster.WaitFor(t, 2*time.Minute, "a Ready pod on the added node", func(context.Context) (bool, string) {
		for _, p := range podsOf(t, ns, "app=nginx-ds") {
			if p.Spec.NodeName == late.Name && podReady(&p) {
				return true, ""
			}
		}
		return false, "no ready pod on " + late.Name
	})
	waitRolledOut(t, ns, "nginx-ds", 5)

	if err := cluster.DeleteNode(ctx, late.Name); err != nil {
		t.Fatal(err)
	}
	// The pod garbage collector removes pods bound to a node that no longer exists after its
	// 40 s quarantine; the DaemonSet controller drops the node from its desired count at once.
	cluster.WaitFor(t, 3*time.Minute, "the deleted node's pod to go away", func(context.Context) (bool, string) {
		for _, p := range podsOf(t, ns, "app=nginx-ds") {
			if p.Spec.NodeName == late.Name {
				return false, "pod " + p.Name + " still bound to " + late.Name
			}
		}
		return true, ""
	})
	waitRolledOut(t, ns, "nginx-ds", 4)
}

func TestRollingUpdateRollsThroughAndKeepsHistory(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", clustertest.SeedManifest(t))
	waitRolledOut(t, ns, "nginx-ds", 4)

	clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds=nginx:1.24.0")
	// kubectl's own rollout watcher must see the update through, as a user would.
	clustertest.Kubectl(t, cluster, "", "rollout", "status", "-n", ns, "ds/nginx-ds", "--timeout=2m")
	waitRolledOut(t, ns, "nginx-ds", 4)
	for _, p := range podsOf(t, ns, "app=nginx-ds") {
		if img := p.Spec.Containers[0].Image; img != "nginx:1.24.0" {
			t.Errorf("pod %s on %s still runs %s", p.Name, p.Spec.NodeName, img)
		}
	}

	history := clustertest.Kubectl(t, cluster, "", "rollout", "history", "-n", ns, "ds/nginx-ds")
	var revisions []string
	for _, line := range strings.Split(history, "\n") {
		// Revision rows start with the number; the header and the object name line do not.
		if f := strings.Fields(line); len(f) > 0 && f[0] != "" && strings.Trim(f[0], "0123456789") == "" {
			revisions = append(revisions, f[0])
		}
	}
	if strings.Join(revisions, ",") != "1,2" {
		t.Errorf("rollout history revisions = %v, want [1 2]:\n%s", revisions, history)
	}
}

// TestTwoClustersCoexistAndStopCleanly starts a second cluster next to the shared one, checks that
// both serve, then stops it and checks that none of its processes survive.
func TestTwoClustersCoexistAndStopCleanly(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	second, err := localcluster.Start(ctx, localcluster.Config{Nodes: localcluster.WorkerNodes("second", 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	if second.KubeconfigPath == cluster.KubeconfigPath || second.RESTConfig.Host == cluster.RESTConfig.Host {
		t.Fatalf("second cluster shares the first one's endpoint %s", second.RESTConfig.Host)
	}
	nodes, err := second.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != 1 || nodes.Items[0].Name != "second-0" {
		t.Fatalf("second cluster has nodes %v, want only second-0", nodes.Items)
	}
	pids := second.PIDs()
	if len(pids) != 5 {
		t.Fatalf("second cluster runs %d processes, want 5 (etcd, apiserver, controller-manager, scheduler, kwok)", len(pids))
	}
	second.Stop()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d survived Stop", pid)
		}
	}
	if _, err := os.Stat(second.Dir); !os.IsNotExist(err) {
		t.Errorf("cluster folder %s survived Stop: %v", second.Dir, err)
	}
	if err := cluster.Healthy(); err != nil {
		t.Errorf("stopping the second cluster hurt the first: %v", err)
	}
}

// alive reports whether pid is a running process (zombies of our own children count as gone).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state letter follows the parenthesised command name.
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// TestKilledOwnerTakesComponentsDown kills the process that owns a cluster with SIGKILL, the one
// signal it cannot clean up after, and checks that the kernel takes every component down with it.
func TestKilledOwnerTakesComponentsDown(t *testing.T) {
	localcluster.NeedCluster(t)
	bin := filepath.Join(t.TempDir(), "localcluster")
	build := exec.Command("go", "build", "-o", bin, "./cmd/localcluster")
	root := toolbin.RepoPath(t)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build localcluster: %v\n%s", err, out)
	}

	owner := exec.Command(bin, "up", "--workers", "0")
	owner.Dir = root
	stdout, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	owner.Stderr = &stderr
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })

	// `up` prints "export KUBECONFIG=<dir>/kubeconfig" once the cluster is ready.
	lines := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		n, _ := stdout.Read(buf)
		lines <- string(buf[:n])
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(3 * time.Minute):
		t.Fatalf("localcluster up did not report a ready cluster:\n%s", stderr.String())
	}
	kubeconfig, ok := strings.CutPrefix(strings.TrimSpace(line), "export KUBECONFIG=")
	if !ok {
		t.Fatalf("unexpected output %q\n%s", line, stderr.String())
	}
	dir := filepath.Dir(kubeconfig)
	t.Cleanup(func() { _ = localcluster.Reap(dir) })
	data, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		var pid int
		if _, err := fmt.Sscan(f, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 5 {
		t.Fatalf("pid file lists %v, want 5 components", pids)
	}

	if err := owner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	cluster.WaitFor(t, 30*time.Second, "every component to die with its owner", func(context.Context) (bool, string) {
		for _, pid := range pids {
			if alive(pid) {
				return false, fmt.Sprintf("pid %d still alive", pid)
			}
		}
		return true, ""
	})
}

// TestStoppedComponentsStartAgainWithTheirData stops and starts etcd and the API server: the
// cluster keeps its endpoint, certificates and objects, and a component stopped on purpose is no
// failure of the cluster.
func TestStoppedComponentsStartAgainWithTheirData(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	ns := cluster.NewTestNamespace(t)
	kept := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}
	if _, err := cluster.Client.CoreV1().ConfigMaps(ns).Create(ctx, kept, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, component := range []string{"kube-apiserver", "etcd"} {
		before := cluster.PIDs()
		if err := cluster.StopComponent(component); err != nil {
			t.Fatal(err)
		}
		if err := cluster.Healthy(); err != nil {
			t.Errorf("a component stopped on purpose counts as failed: %v", err)
		}
		if err := cluster.StopComponent(component); err == nil {
			t.Errorf("stopping %s twice gave no error", component)
		}
		startCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := cluster.StartComponent(startCtx, component)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		got, err := cluster.Client.CoreV1().ConfigMaps(ns).Get(ctx, "kept", metav1.GetOptions{})
		if err != nil || got.Data["k"] != "v" {
			t.Errorf("after %s started again: ConfigMap %v, %v", component, got.Data, err)
		}
		if slices.Equal(before, cluster.PIDs()) {
			t.Errorf("%s runs in the same process as before", component)
		}
		if err := cluster.StartComponent(ctx, component); err == nil {
			t.Errorf("starting a running %s gave no error", component)
		}
	}
	if err := cluster.StopComponent("kube-proxy"); err == nil {
		t.Error("stopping a component the cluster does not run gave no error")
	}
}
