package localcluster

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// A real node runs kubelet, Debian's containerd and runc, the CNI bridge and kube-proxy in place of
// one kwok node, so its pods are real containers. The settings below that are not defaults were each
// needed on the hosts this runs on (cgroup v1, root without CAP_SYS_RESOURCE, no image registry).
//
// Ports inside the node's network namespace cannot collide with the host's or another cluster's;
// they are still off the defaults so that nobody reading a log mistakes them for a system kubelet.
const (
	kubeletPort          = 11250
	kubeletHealthzPort   = 11248
	kubeProxyMetricsPort = 11249
	kubeProxyHealthzPort = 11256
)

// realNodeDeps maps the programs a real node runs to the Debian package that installs them.
var realNodeDeps = []struct{ bin, pkg string }{
	{"containerd", "containerd"},
	{"containerd-shim-runc-v2", "containerd"},
	{"ctr", "containerd"},
	{"runc", "runc"},
	{filepath.Join(cniBinDir, "bridge"), "containernetworking-plugins"},
	{"iptables", "iptables"},
	{"conntrack", "conntrack"},
	{"ip", "iproute2"},
	{"nsenter", "util-linux"},
}

// MissingRealNodeDeps says what a real node lacks on this machine: not root, or the Debian packages
// whose programs are missing. Empty means a real node can start.
func MissingRealNodeDeps() string {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "root (network namespaces, mounts, cgroups)")
	}
	var pkgs []string
	for _, d := range realNodeDeps {
		if !hasProgram(d.bin) && !slices.Contains(pkgs, d.pkg) {
			pkgs = append(pkgs, d.pkg)
		}
	}
	if len(pkgs) > 0 {
		problems = append(problems, "Debian packages "+strings.Join(pkgs, ", ")+" (make testdeps installs them as root)")
	}
	return strings.Join(problems, "; ")
}

func hasProgram(bin string) bool {
	if filepath.IsAbs(bin) {
		fi, err := os.Stat(bin)
		return err == nil && fi.Mode()&0o111 != 0
	}
	if _, err := exec.LookPath(bin); err == nil {
		return true
	}
	// iptables, conntrack and ip live in /usr/sbin, which a non-root PATH may lack.
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if fi, err := os.Stat(filepath.Join(dir, bin)); err == nil && fi.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// realNode is the state of the real node: what teardown (also Reap's, from another process) needs,
// written to the node's folder as JSON.
type realNode struct {
	Name string      `json:"name"`
	Dir  string      `json:"dir"` // the node's folder, under the cluster's
	Net  nodeNetwork `json:"network"`
	// CgroupRoot is the kubelet's cgroupRoot: every pod's cgroup is below it in every hierarchy.
	CgroupRoot string `json:"cgroupRoot"`
	// Sysctls are the host's values, before the kubelet started, of the kernel settings the kubelet
	// changes: teardown puts them back.
	Sysctls map[string]string `json:"sysctls"`

	net      nodeNetwork // same as Net; short for use in code
	spec     Node
	forwards []net.Listener // TrustRegistry's; closed by Stop
}

const realNodeStateFile = "realnode.json"

func (n *realNode) path(elem ...string) string {
	return filepath.Join(append([]string{n.Dir}, elem...)...)
}

// newRealNode claims the node's network (before kube-apiserver starts: it binds the host's end)
// and records the node's state in the cluster folder.
func newRealNode(clusterDir string, spec Node) (*realNode, error) {
	netw, err := claimNodeNetwork()
	if err != nil {
		return nil, err
	}
	n := &realNode{
		Name: spec.Name, Dir: filepath.Join(clusterDir, "node"), Net: netw, net: netw, spec: spec,
		CgroupRoot: "/" + filepath.Base(clusterDir),
		Sysctls:    readSysctls(),
	}
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		netw.tearDown()
		return nil, err
	}
	data, _ := json.Marshal(n)
	if err := os.WriteFile(n.path(realNodeStateFile), data, 0o644); err != nil {
		netw.tearDown()
		return nil, fmt.Errorf("record the real node's state: %w", err)
	}
	return n, nil
}

// realNodeSpec picks the node of nodes that becomes real: the first control-plane node.
func realNodeSpec(nodes []Node) (Node, []Node, error) {
	for i, n := range nodes {
		if _, ok := n.Labels[ControlPlaneLabel]; ok {
			return n, append(slices.Clone(nodes[:i]), nodes[i+1:]...), nil
		}
	}
	return Node{}, nil, errors.New("Config.RealNode needs a control-plane node among Config.Nodes to run as the real node")
}

// startRealNode starts containerd, imports the test images, starts the kubelet and kube-proxy and
// waits until the node is Ready, labelled and schedulable.
func (c *Cluster) startRealNode(ctx context.Context) error {
	n := c.node
	began := time.Now()
	// The images build (or come from their cache) while containerd starts.
	type built struct {
		images []nodeimages.Image
		err    error
	}
	imagesBuilt := make(chan built, 1)
	go func() {
		dir, err := nodeimages.CacheDir()
		if err != nil {
			imagesBuilt <- built{err: err}
			return
		}
		images, err := nodeimages.Build(ctx, dir)
		imagesBuilt <- built{images, err}
	}()
	fmt.Fprintf(c.log, "Starting real node %s: containerd, kubelet and kube-proxy in network namespace %s (node IP %s, pods %s)\n",
		n.Name, n.net.Netns, n.net.NodeIP(), n.net.PodCIDR())
	for _, d := range []string{"cni/net.d", "containerd/certs.d", "kubelet", "pod-logs"} {
		if err := os.MkdirAll(n.path(d), 0o755); err != nil {
			return err
		}
	}
	if err := n.makeCgroupRoot(); err != nil {
		return err
	}
	kubeletKubeconfig, err := c.writeKubeletCredentials()
	if err != nil {
		return err
	}
	files := map[string]string{
		"containerd.toml":              n.containerdConfig(),
		"cni/net.d/10-bridge.conflist": n.cniConfig(),
		"kubelet.yaml":                 n.kubeletConfig(c.pki.CACert),
		"kube-proxy.yaml":              n.kubeProxyConfig(c.KubeconfigPath),
	}
	for name, content := range files {
		if err := os.WriteFile(n.path(name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("write the real node's %s: %w", name, err)
		}
	}
	logDir := filepath.Join(c.Dir, "logs")
	if err := c.runInNode("containerd", "containerd", []string{"--config", n.path("containerd.toml")}, logDir); err != nil {
		return err
	}
	if err := c.waitContainerd(ctx); err != nil {
		return c.componentErr(err)
	}
	b := <-imagesBuilt
	if b.err != nil {
		return fmt.Errorf("build the node's test images: %w", b.err)
	}
	for _, img := range b.images {
		if err := n.importImage(ctx, img); err != nil {
			return err
		}
	}
	if err := c.runInNode("kubelet", c.Binaries.Path("kubelet"), []string{
		"--config=" + n.path("kubelet.yaml"),
		"--kubeconfig=" + kubeletKubeconfig,
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.net.NodeIP(),
		"--root-dir=" + n.path("kubelet"),
		"--cert-dir=" + n.path("kubelet", "pki"),
		"--v=1",
	}, logDir); err != nil {
		return err
	}
	if err := c.runInNode("kube-proxy", c.Binaries.Path("kube-proxy"), []string{"--config=" + n.path("kube-proxy.yaml")}, logDir); err != nil {
		return err
	}
	if err := writePIDs(c.Dir, c.procs); err != nil {
		return err
	}
	if err := c.labelRealNode(ctx); err != nil {
		return c.componentErr(err)
	}
	if err := c.WaitNodesSchedulable(ctx, n.Name); err != nil {
		return c.componentErr(err)
	}
	fmt.Fprintf(c.log, "Real node %s Ready %.1fs after containerd started\n", n.Name, time.Since(began).Seconds())
	return nil
}

// apiServerNodeFlags are kube-apiserver's flags that depend on a real node. Without one, the
// `kubernetes` Service gets no endpoints: they would point at loopback, which the API rejects. With
// one, kube-apiserver calls webhooks behind a Service at its endpoints' pod IPs, so admission does
// not depend on kube-proxy, and reaches the kubelet (logs, exec) with the admin certificate,
// verifying the kubelet's serving certificate.
func (c *Cluster) apiServerNodeFlags(pki *pkiFiles) []string {
	if c.node == nil {
		return []string{"--endpoint-reconciler-type=none"}
	}
	return []string{
		"--enable-aggregator-routing=true",
		"--kubelet-client-certificate=" + pki.AdminCert,
		"--kubelet-client-key=" + pki.AdminKey,
		"--kubelet-certificate-authority=" + pki.CACert,
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// runInNode starts a component of the real node inside its network namespace. nsenter enters the
// namespace and execs the program, so the recorded pid is the component's own.
func (c *Cluster) runInNode(name, bin string, args []string, logDir string) error {
	return c.runBinary(name, "nsenter", append([]string{"--net=" + c.node.net.NetnsPath(), "--", bin}, args...), logDir)
}

func (c *Cluster) waitContainerd(ctx context.Context) error {
	return c.waitUntil(ctx, "containerd", func(ctx context.Context) error {
		_, err := c.node.ctr(ctx, "version")
		return err
	})
}

// writeKubeletCredentials issues the kubelet's client certificate (system:node:NAME in
// system:nodes, which the Node authorizer and NodeRestriction expect) and serving certificate
// (for the node IP) and writes its kubeconfig.
func (c *Cluster) writeKubeletCredentials() (string, error) {
	n := c.node
	client, err := c.pki.ca.issue("system:node:"+n.Name, []string{"system:nodes"}, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return "", err
	}
	serving, err := c.pki.ca.issue(n.Name, nil, []string{n.Name}, []net.IP{net.ParseIP(n.net.NodeIP())}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{"kubelet.crt": serving.CertPEM, "kubelet.key": serving.KeyPEM} {
		if err := os.WriteFile(n.path(name), data, 0o600); err != nil {
			return "", err
		}
	}
	const ctxName = "node"
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{ctxName: {Server: c.RESTConfig.Host, CertificateAuthorityData: c.pki.CACertPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{ctxName: {ClientCertificateData: client.CertPEM, ClientKeyData: client.KeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{ctxName: {Cluster: ctxName, AuthInfo: ctxName}},
		CurrentContext: ctxName,
	}
	path := n.path("kubelet.kubeconfig")
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		return "", fmt.Errorf("write the kubelet's kubeconfig: %w", err)
	}
	return path, nil
}

// kubeletConfig is the KubeletConfiguration. failCgroupV1: false and cgroupfs because the host
// mounts cgroup v1; eviction and image GC thresholds out of the way because imported images
// cannot be pulled again and a busy CI disk must not evict the test's pods.
func (n *realNode) kubeletConfig(caFile string) string {
	var taints strings.Builder
	for _, t := range n.spec.Taints {
		fmt.Fprintf(&taints, "\n- {key: %q, value: %q, effect: %q}", t.Key, t.Value, t.Effect)
	}
	taintList := "[]"
	if taints.Len() > 0 {
		taintList = taints.String()
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
containerRuntimeEndpoint: unix://%[2]s
address: %[3]q
port: %[4]d
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
readOnlyPort: 0
tlsCertFile: %[6]q
tlsPrivateKeyFile: %[7]q
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[8]q}
authorization: {mode: Webhook}
clusterDomain: cluster.local
failSwapOn: false
podLogsDir: %[9]q
resolvConf: ""
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerWithTaints: %[10]s
`, n.CgroupRoot, n.containerdSocket(), n.net.NodeIP(), kubeletPort, kubeletHealthzPort,
		n.path("kubelet.crt"), n.path("kubelet.key"), caFile, n.path("pod-logs"), taintList)
}

// kubeProxyConfig runs kube-proxy in iptables mode inside the node's namespace. It leaves the
// conntrack sysctls alone (some are global to the host) and is written once: kube-proxy exits when
// its configuration file changes under it.
func (n *realNode) kubeProxyConfig(kubeconfig string) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
mode: iptables
hostnameOverride: %q
clusterCIDR: %q
bindAddress: %q
metricsBindAddress: 127.0.0.1:%d
healthzBindAddress: 127.0.0.1:%d
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, kubeconfig, n.Name, n.net.PodCIDR(), n.net.NodeIP(), kubeProxyMetricsPort, kubeProxyHealthzPort)
}

// labelRealNode waits for the kubelet to register the node and gives it the labels of its spec:
// NodeRestriction forbids a kubelet to set node-role labels itself, so, as kubeadm does, the admin
// sets them.
func (c *Cluster) labelRealNode(ctx context.Context) error {
	labels := map[string]string{HostnameLabel: c.node.Name}
	for k, v := range c.node.spec.Labels {
		labels[k] = v
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		_, last = c.Client.CoreV1().Nodes().Patch(ctx, c.node.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the kubelet to register node %s: %w (last: %v)", c.node.Name, err, last)
	}
	return nil
}

// RealNodeName returns the name of the real node, or "" when the cluster has none.
func (c *Cluster) RealNodeName() string {
	if c.node == nil {
		return ""
	}
	return c.node.Name
}

// NodeHostIP returns the host's address on the real node's network: kube-apiserver listens there,
// and a server on the host that pods or the node's containerd must reach has to listen there too.
func (c *Cluster) NodeHostIP() string {
	if c.node == nil {
		return ""
	}
	return c.node.net.HostIP()
}

// NodeContainers lists the containers the node's containerd
// runs for pods, as "namespace/pod/container" mapped to the task's status (RUNNING, STOPPED...).
func (c *Cluster) NodeContainers(ctx context.Context) (map[string]string, error) {
	if c.node == nil {
		return nil, errors.New("the cluster has no real node (Config.RealNode)")
	}
	out, err := c.node.ctr(ctx, "containers", "ls", "--quiet")
	if err != nil {
		return nil, err
	}
	tasks, err := c.node.ctr(ctx, "tasks", "ls")
	if err != nil {
		return nil, err
	}
	status := map[string]string{}
	for _, line := range strings.Split(tasks, "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 3 {
			status[f[0]] = f[2]
		}
	}
	result := map[string]string{}
	for _, id := range strings.Fields(out) {
		info, err := c.node.ctr(ctx, "containers", "info", id)
		if err != nil {
			continue // removed meanwhile
		}
		var ci struct {
			Labels map[string]string `json:"Labels"`
		}
		if err := json.Unmarshal([]byte(info), &ci); err != nil {
			return nil, fmt.Errorf("parse ctr containers info %s: %w", id, err)
		}
		name := ci.Labels["io.kubernetes.container.name"]
		if name == "" || ci.Labels["io.cri-containerd.kind"] != "container" {
			continue
		}
		key := ci.Labels["io.kubernetes.pod.namespace"] + "/" + ci.Labels["io.kubernetes.pod.name"] + "/" + name
		if s := status[id]; s != "" && result[key] != "RUNNING" {
			result[key] = s
		}
	}
	return result, nil
}
