package localcluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// TestRealNodeRunsContainersAndLeavesNothingBehind starts a cluster whose control-plane node is a
// real node and checks what a real node adds over kwok: the node becomes Ready through its kubelet,
// a DaemonSet tolerating the control-plane taint runs a real container there (containerd runs it,
// the kubelet probes it, its log is served through the API server), the pod reaches the API server
// through the `kubernetes` Service, the kubelet's restart brings the pod back Ready, and Stop
// leaves no process, network namespace, veth, mount, cgroup, iptables chain or changed sysctl.
func TestRealNodeRunsContainersAndLeavesNothingBehind(t *testing.T) {
	localcluster.NeedRealNode(t)
	ctx := context.Background()
	hostBefore := hostNetworkState(t)

	began := time.Now()
	nodes := append([]localcluster.Node{localcluster.ControlPlaneNode("control-plane-0")}, localcluster.WorkerNodes("worker", 1)...)
	c, err := localcluster.Start(ctx, localcluster.Config{Nodes: nodes, RealNode: true, Log: testLog{t}, StartTimeout: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			c.Stop()
		}
	})
	t.Logf("cluster with a real node Ready %.1fs after Start", time.Since(began).Seconds())
	if got := c.RealNodeName(); got != "control-plane-0" {
		t.Fatalf("real node is %q, want control-plane-0", got)
	}
	node, err := c.Client.CoreV1().Nodes().Get(ctx, "control-plane-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := node.Labels[localcluster.ControlPlaneLabel]; !ok || !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == localcluster.ControlPlaneLabel && t.Effect == corev1.TaintEffectNoSchedule
	}) {
		t.Fatalf("real node lacks the control-plane label or taint: labels %v, taints %v", node.Labels, node.Spec.Taints)
	}
	if v := node.Status.NodeInfo.KubeletVersion; !strings.HasPrefix(v, "v1.") || strings.Contains(v, "master") {
		t.Errorf("kubelet reports version %q, want the stamped release", v)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://") {
		t.Errorf("node runs %q, want containerd", rt)
	}

	ns := c.NewTestNamespace(t)
	ds := agentDaemonSet(ns)
	if _, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitAgentReady(t, c, ns)

	// The container really runs: containerd has its task running, and its log (which the kubelet
	// serves to the API server) has the agent's start line.
	containers, err := c.NodeContainers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := ns + "/" + pod.Name + "/agent"
	if containers[key] != "RUNNING" {
		t.Fatalf("containerd reports container %s as %q, want RUNNING (all: %v)", key, containers[key], containers)
	}
	logs, err := c.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: "agent"}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("read the agent's log through the API server and kubelet: %v", err)
	}
	if !strings.Contains(string(logs), "Started node agent") || !strings.Contains(string(logs), "control-plane-0") {
		t.Errorf("agent log lacks its start line on control-plane-0:\n%s", logs)
	}

	// The host reaches the pod IP (as kube-apiserver reaches webhooks), and the pod reaches the API
	// server through the `kubernetes` Service with its service-account token.
	if body := httpGet(t, nil, "http://"+net.JoinHostPort(pod.Status.PodIP, "8080")+"/version", "", nil); !strings.Contains(body, "v1") {
		t.Errorf("agent's /version from the host answered %q, want v1", body)
	}
	svc, err := c.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pid := containerPID(t, c, ctx, pod)
	secrets := fmt.Sprintf("/proc/%d/root/var/run/secrets/kubernetes.io/serviceaccount/", pid)
	token, err := os.ReadFile(secrets + "token")
	if err != nil {
		t.Fatalf("read the pod's service-account token: %v", err)
	}
	ca, err := os.ReadFile(secrets + "ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	netns := fmt.Sprintf("/proc/%d/ns/net", pid)
	var version struct{ GitVersion string }
	body := httpGet(t, dialerIn(netns), "https://"+net.JoinHostPort(svc.Spec.ClusterIP, "443")+"/version", string(token), ca)
	if err := json.Unmarshal([]byte(body), &version); err != nil || !strings.HasPrefix(version.GitVersion, "v1.") {
		t.Errorf("GET /version through the kubernetes Service from the pod answered %q (%v)", body, err)
	}

	// A registry on the host's loopback is reachable from the node's network once trusted.
	registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "registry at "+r.URL.Path)
	}))
	defer registry.Close()
	hostPort := strings.TrimPrefix(registry.URL, "http://")
	if err := c.TrustRegistry(hostPort); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(hostPort)
	if body := httpGet(t, dialerIn(netns), "http://"+net.JoinHostPort(c.NodeHostIP(), port)+"/v2/", "", nil); body != "registry at /v2/" {
		t.Errorf("registry on the host's loopback answered the node's network with %q", body)
	}

	// A restarted kubelet finds its pod and reports it Ready again.
	if err := c.StopComponent("kubelet"); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	if err := c.StartComponent(ctx, "kubelet"); err != nil {
		t.Fatal(err)
	}
	waitNodeReady(t, c, "control-plane-0", restarted)
	waitAgentReady(t, c, ns)
	t.Logf("node and agent pod Ready %.1fs after the kubelet's restart", time.Since(restarted).Seconds())

	c.Stop()
	stopped = true
	if left := c.RealNodeLeftovers(); len(left) > 0 {
		t.Errorf("Stop left the real node's %s", strings.Join(left, "; "))
	}
	if after := hostNetworkState(t); after != hostBefore {
		t.Errorf("the host's network changed:\nbefore: %s\nafter:  %s", hostBefore, after)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("cluster folder %s survived Stop: %v", c.Dir, err)
	}
}

func agentDaemonSet(ns string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "node-agent"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "node-agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Tolerations: []corev1.Toleration{{Key: localcluster.ControlPlaneLabel, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers: []corev1.Container{{
						Name:            "agent",
						Image:           nodeimages.AgentV1,
						ImagePullPolicy: corev1.PullNever,
						Env:             []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}

// waitAgentReady waits until the agent pod on the real node is Running and Ready and returns it.
func waitAgentReady(t *testing.T, c *localcluster.Cluster, ns string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	c.WaitFor(t, 2*time.Minute, "node-agent pod Ready on control-plane-0", func(ctx context.Context) (bool, string) {
		list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=control-plane-0"})
		if err != nil {
			return false, err.Error()
		}
		for i := range list.Items {
			p := &list.Items[i]
			if podReady(p) {
				pod = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d pods: %s", len(list.Items), podStates(list.Items))
	})
	return pod
}

func podStates(pods []corev1.Pod) string {
	var s []string
	for _, p := range pods {
		state := string(p.Status.Phase)
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Waiting != nil {
				state += " " + cs.State.Waiting.Reason + ": " + cs.State.Waiting.Message
			}
		}
		s = append(s, p.Name+" "+state)
	}
	return strings.Join(s, "; ")
}

// waitNodeReady waits until the node's kubelet has reported it Ready after since.
func waitNodeReady(t *testing.T, c *localcluster.Cluster, name string, since time.Time) {
	t.Helper()
	c.WaitFor(t, time.Minute, "node "+name+" reported Ready", func(ctx context.Context) (bool, string) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status == corev1.ConditionTrue && !cond.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)),
					fmt.Sprintf("%s %s, last heartbeat %s", cond.Status, cond.Reason, cond.LastHeartbeatTime)
			}
		}
		return false, "no Ready condition"
	})
}

// containerPID returns the host pid of the pod's agent container, from containerd's task list.
func containerPID(t *testing.T, c *localcluster.Cluster, ctx context.Context, pod *corev1.Pod) int {
	t.Helper()
	for _, cs := range pod.Status.ContainerStatuses {
		id, ok := strings.CutPrefix(cs.ContainerID, "containerd://")
		if !ok {
			continue
		}
		data, err := os.ReadFile(filepath.Join(c.Dir, "node", "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io", id, "init.pid"))
		if err != nil {
			t.Fatalf("find the pid of container %s: %v", id, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatalf("container %s has pid %q: %v", id, data, err)
		}
		return pid
	}
	t.Fatalf("pod %s reports no containerd container: %+v", pod.Name, pod.Status.ContainerStatuses)
	return 0
}

// dialerIn returns a dialer whose connections start in the network namespace at path, as a
// process in that pod would open them: a socket belongs to the namespace of the thread creating it.
// The thread goes back to the host's namespace before it is unlocked. It must not end instead: the
// components' parent-death signal fires when the thread that started them exits, and this thread
// may be that one.
func dialerIn(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			conn net.Conn
			err  error
		}
		done := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			host, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				runtime.UnlockOSThread()
				done <- result{err: fmt.Errorf("open this thread's network namespace: %w", err)}
				return
			}
			defer unix.Close(host)
			pod, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				runtime.UnlockOSThread()
				done <- result{err: fmt.Errorf("open %s: %w", path, err)}
				return
			}
			defer unix.Close(pod)
			if err := unix.Setns(pod, unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				done <- result{err: fmt.Errorf("enter %s: %w", path, err)}
				return
			}
			conn, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
			if unix.Setns(host, unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread() // else the thread ends with the goroutine, still locked
			}
			done <- result{conn, err}
		}()
		r := <-done
		return r.conn, r.err
	}
}

// httpGet GETs url (with a bearer token and CA when given) and returns the body of a 200 answer.
func httpGet(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), url, token string, caPEM []byte) string {
	t.Helper()
	tr := &http.Transport{DialContext: dial, DisableKeepAlives: true}
	if caPEM != nil {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(caPEM)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body)
}

// hostNetworkState summarises what a real node could leave changed in the host's network stack:
// forwarding, the KUBE-/CNI- iptables chains and the kernel settings the kubelet changes. The node's own interfaces are RealNodeLeftovers'.
func hostNetworkState(t *testing.T) string {
	t.Helper()
	forward, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward")
	if err != nil {
		t.Fatal(err)
	}
	var chains []string
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, err := exec.Command("iptables", "-t", table, "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -t %s -S: %v: %s", table, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "-N" && (strings.HasPrefix(f[1], "KUBE-") || strings.HasPrefix(f[1], "CNI-")) {
				chains = append(chains, table+"/"+f[1])
			}
		}
	}
	var sysctls []string
	for _, name := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys"} {
		data, _ := os.ReadFile(filepath.Join("/proc/sys", name))
		sysctls = append(sysctls, name+"="+strings.TrimSpace(string(data)))
	}
	return fmt.Sprintf("ip_forward=%s chains=%v sysctls=%v", strings.TrimSpace(string(forward)), chains, sysctls)
}

// testLog sends a cluster's progress lines to the test log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
