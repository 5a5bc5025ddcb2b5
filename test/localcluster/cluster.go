// Package localcluster starts and stops a real Kubernetes control plane on loopback: etcd,
// kube-apiserver, kube-controller-manager (with the real DaemonSet, node lifecycle and pod GC
// controllers), kube-scheduler, and kwok faking the nodes and their kubelets. Tests, benchmarks and
// the demo run against it instead of mocks; nothing is downloaded, every binary is built from the
// Go module proxy by the tools modules (see toolbin.Ensure).
package localcluster

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// Labels and taints of the default topology, matching what kubeadm puts on nodes.
const (
	ControlPlaneLabel = "node-role.kubernetes.io/control-plane"
	ZoneLabel         = "topology.kubernetes.io/zone"
	HostnameLabel     = "kubernetes.io/hostname"
	// KwokNodeAnnotation marks the nodes kwok manages; nodes without it are left alone.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// UnstartedLabel on a pod bound to a kwok node keeps it Pending: kwok disregards the pod and
	// plays none of its stages, not even the deletion, so such a pod, once deleted, stays
	// Terminating. A benchmark that fills nodes with pods only their presence matters for spares
	// the control plane a status write and an IP per pod, and kwok the work of each pod's events.
	UnstartedLabel = "kwok.daemonguard.io/unstarted"
)

// Config says what cluster to start. The zero value starts DefaultNodes in a temp folder.
type Config struct {
	// Nodes created and waited for (Ready, not-ready taint gone) before Start returns.
	// Nil means DefaultNodes(); an empty non-nil slice means no nodes.
	Nodes []Node
	// ParentDir holds the cluster's folder (certificates, kubeconfig, etcd data, logs).
	// Empty means the system temp dir.
	ParentDir string
	// Log receives progress lines meant for a person. Nil discards them.
	Log io.Writer
	// ExtraKwokStages are additional kwok Stage documents (YAML), for tests that model kubelet
	// behaviour such as image pull failures.
	ExtraKwokStages []byte
	// StartTimeout bounds Start, binary build excluded. Zero means 2 minutes.
	StartTimeout time.Duration
	// PodReadyDelay makes kwok's fake kubelets take this long to report a pod Running and Ready,
	// like a real container start; zero is instant.
	PodReadyDelay time.Duration
	// NodeLeaseDuration is how long kwok's node leases last (each node renews its lease every
	// quarter of it) and, with a margin, how long the node lifecycle controller waits for a
	// renewal before it marks a node NotReady. Zero means 40 s. Thousands of fake nodes renew
	// hundreds of leases per second at 40 s: a longer lease keeps a large cluster's idle load low.
	NodeLeaseDuration time.Duration
	// KubernetesVersion is the control plane to run, one of toolbin.KubernetesVersions, by its
	// version or minor (v1.33.13, 1.33). Empty means the environment's
	// DAEMONGUARD_KUBERNETES_VERSION (how `make test-kubernetes` runs a package's tests on another
	// version), else the newest, toolbin.KubernetesVersion.
	KubernetesVersion string
	// RealNode runs the first control-plane node of Nodes as a real node — kubelet, containerd, runc,
	// the CNI bridge and kube-proxy, with the test images of test/nodeimages imported — instead of
	// a kwok node; the others stay kwok nodes. It needs root and Debian's packages
	// (MissingRealNodeDeps; make testdeps). See realnode.go.
	RealNode bool
}

// Cluster is a running local control plane.
type Cluster struct {
	// Dir holds everything of this cluster; logs are in Dir/logs/<component>.log.
	Dir string
	// KubeconfigPath is an admin kubeconfig (system:masters) for kubectl, helm and clients.
	KubeconfigPath string
	// RESTConfig is the admin client configuration, with QPS high enough for 1,000-node tests.
	RESTConfig *rest.Config
	// Client is a typed clientset built from RESTConfig.
	Client kubernetes.Interface
	// Binaries gives access to the built test binaries (helm, kwok, ...).
	Binaries *toolbin.Binaries
	// KubernetesVersion is the control plane's version, one of toolbin.KubernetesVersions.
	KubernetesVersion string

	log      io.Writer
	pki      *pkiFiles
	etcdURL  string
	kcmURL   string // kube-controller-manager's secure port, for its /metrics
	mu       sync.Mutex
	procs    []*process // in start order; stopped in reverse
	node     *realNode  // nil unless Config.RealNode
	stopOnce sync.Once
}

// Start builds (or reuses) the binaries, starts every component on free loopback ports, creates
// the nodes and waits until they are Ready. On error everything already started is stopped.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	version, err := toolbin.KubernetesRelease(cmp.Or(cfg.KubernetesVersion, os.Getenv(KubernetesVersionEnv), toolbin.KubernetesVersion))
	if err != nil {
		return nil, err
	}
	binaries := []string{"etcd", "kwok"}
	if cfg.RealNode && version != toolbin.KubernetesVersion {
		// Kubernetes' skew policy: a kubelet is never newer than its API server.
		return nil, fmt.Errorf("a real node runs the kubelet of Kubernetes %s, newer than the control plane %s: run it on %s", toolbin.KubernetesVersion, version, toolbin.KubernetesVersion)
	}
	for _, component := range toolbin.ControlPlaneComponents {
		binaries = append(binaries, toolbin.ControlPlaneBinary(component, version))
	}
	if cfg.RealNode {
		if missing := MissingRealNodeDeps(); missing != "" {
			return nil, fmt.Errorf("a real node needs %s", missing)
		}
		binaries = append(binaries, "kubelet", "kube-proxy")
	}
	bins, err := toolbin.Ensure(ctx, log, binaries...)
	if err != nil {
		return nil, err
	}
	parent := cfg.ParentDir
	if parent == "" {
		parent = os.TempDir()
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	// Ports are chosen free but released before the components bind them, so a concurrent
	// cluster can take one first; such a start is retried from scratch on new ports.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		dir, err := os.MkdirTemp(parent, "daemonguard-cluster-")
		if err != nil {
			return nil, fmt.Errorf("create cluster dir: %w", err)
		}
		c := &Cluster{Dir: dir, Binaries: bins, KubernetesVersion: version, log: log}
		startCtx, cancel := context.WithTimeout(ctx, timeout)
		err = c.start(startCtx, cfg)
		cancel()
		if err == nil {
			return c, nil
		}
		var exited *exitError
		if errors.As(err, &exited) && exited.portTaken() && attempt < attempts {
			fmt.Fprintf(log, "%s lost its port to another process; retrying on new ports\n", exited.name)
			c.stop(true)
			continue
		}
		c.stop(false)
		return nil, fmt.Errorf("start local cluster (logs in %s): %w", filepath.Join(dir, "logs"), err)
	}
}

func (c *Cluster) start(ctx context.Context, cfg Config) error {
	logDir := filepath.Join(c.Dir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	nodes := cfg.Nodes
	if nodes == nil {
		nodes = DefaultNodes()
	}
	// Without a real node everything listens on loopback. With one, kube-apiserver binds and
	// advertises the host's address on the node's network, where pods reach it.
	apiAddr, serviceCIDR := "127.0.0.1", "10.96.0.0/16"
	var apiIPs []net.IP
	if cfg.RealNode {
		spec, rest, err := realNodeSpec(nodes)
		if err != nil {
			return err
		}
		nodes = rest
		if c.node, err = newRealNode(c.Dir, spec); err != nil {
			return err
		}
		apiAddr, serviceCIDR = c.node.net.HostIP(), c.node.net.ServiceCIDR()
		apiIPs = []net.IP{net.ParseIP(apiAddr), net.ParseIP(c.node.net.KubernetesServiceIP())}
	}
	pki, err := writePKI(c.Dir, apiIPs...)
	if err != nil {
		return err
	}
	c.pki = pki
	ports, err := freePorts(6)
	if err != nil {
		return err
	}
	etcdPort, etcdPeerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	c.kcmURL = "https://127.0.0.1:" + strconv.Itoa(kcmPort)

	fmt.Fprintf(c.log, "Starting etcd, kube-apiserver %s, kube-controller-manager, kube-scheduler and kwok in %s\n", c.KubernetesVersion, c.Dir)
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	c.etcdURL = etcdURL
	peerURL := "http://127.0.0.1:" + strconv.Itoa(etcdPeerPort)
	if err := c.run("etcd", []string{
		"--name=default",
		"--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync=true", // throwaway data: durability costs seconds per test for nothing
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	}, logDir); err != nil {
		return err
	}
	if err := waitHTTP(ctx, etcdURL+"/health", nil, "etcd"); err != nil {
		return c.componentErr(err)
	}

	apiURL := "https://" + net.JoinHostPort(apiAddr, strconv.Itoa(apiPort))
	if err := c.run("kube-apiserver", append([]string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=" + apiAddr,
		"--advertise-address=" + apiAddr,
		"--secure-port=" + strconv.Itoa(apiPort),
		"--tls-cert-file=" + pki.APIServerCert,
		"--tls-private-key-file=" + pki.APIServerKey,
		"--client-ca-file=" + pki.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.ServiceAcctPub,
		"--service-account-signing-key-file=" + pki.ServiceAcctKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultTolerationSeconds," +
			"Priority,TaintNodesByCondition,PodSecurity,MutatingAdmissionWebhook,ValidatingAdmissionWebhook," +
			"ValidatingAdmissionPolicy,ResourceQuota,NodeRestriction",
		"--allow-privileged=true",
		"--max-requests-inflight=2000",
		"--max-mutating-requests-inflight=1000",
		"--profiling=false",
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver"),
	}, c.apiServerNodeFlags(pki)...), logDir); err != nil {
		return err
	}

	if err := c.writeKubeconfig(apiURL, pki); err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return c.componentErr(err)
	}

	if err := c.run("kube-controller-manager", []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--authentication-kubeconfig=" + c.KubeconfigPath,
		"--authorization-kubeconfig=" + c.KubeconfigPath,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(kcmPort),
		"--leader-elect=false",
		// nodeipam would need a cluster CIDR; everything else, including node lifecycle (which
		// lifts the not-ready taint from kwok's nodes), daemonset and podgc, runs as in a real cluster.
		"--controllers=*,-nodeipam",
		"--service-account-private-key-file=" + pki.ServiceAcctKey,
		"--root-ca-file=" + pki.CACert,
		"--use-service-account-credentials=false",
		"--cluster-name=daemonguard-local",
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--node-monitor-grace-period=" + nodeMonitorGracePeriod(cfg.NodeLeaseDuration).String(),
		"--cert-dir=" + filepath.Join(c.Dir, "kcm"),
	}, logDir); err != nil {
		return err
	}
	// The scheduler's default client QPS (50) would make binding, not the controllers under
	// test, the bottleneck of 1,000-node rollouts.
	schedConfig := filepath.Join(c.Dir, "scheduler.yaml")
	if err := os.WriteFile(schedConfig, []byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"+
		"leaderElection: {leaderElect: false}\nclientConnection: {kubeconfig: "+strconv.Quote(c.KubeconfigPath)+", qps: 500, burst: 1000}\n"), 0o644); err != nil {
		return err
	}
	if err := c.run("kube-scheduler", []string{
		"--config=" + schedConfig,
		"--authentication-kubeconfig=" + c.KubeconfigPath,
		"--authorization-kubeconfig=" + c.KubeconfigPath,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(schedPort),
		"--cert-dir=" + filepath.Join(c.Dir, "scheduler"),
	}, logDir); err != nil {
		return err
	}

	kwokConfig, err := c.writeKwokConfig(cfg)
	if err != nil {
		return err
	}
	if err := c.run("kwok", []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--config=" + kwokConfig,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--server-address=127.0.0.1:" + strconv.Itoa(kwokPort),
	}, logDir); err != nil {
		return err
	}
	if err := writePIDs(c.Dir, c.procs); err != nil {
		return err
	}

	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // self-signed loopback health endpoints
	if err := waitHTTP(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", kcmPort), insecure, "kube-controller-manager"); err != nil {
		return c.componentErr(err)
	}
	if err := waitHTTP(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort), insecure, "kube-scheduler"); err != nil {
		return c.componentErr(err)
	}
	// Pods in a namespace can only be created once its default ServiceAccount exists.
	if err := c.waitServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
		return c.componentErr(err)
	}

	count := len(nodes)
	if c.node != nil {
		if err := c.startRealNode(ctx); err != nil {
			return err
		}
		count++
	}
	if err := c.AddNodes(ctx, nodes...); err != nil {
		return c.componentErr(err)
	}
	fmt.Fprintf(c.log, "Cluster ready: %d nodes, KUBECONFIG=%s\n", count, c.KubeconfigPath)
	return nil
}

// KubernetesVersionEnv names the environment variable that picks the control plane when
// Config.KubernetesVersion is empty.
const KubernetesVersionEnv = "DAEMONGUARD_KUBERNETES_VERSION"

// run starts a component; a control-plane component at the cluster's version.
func (c *Cluster) run(name string, args []string, logDir string) error {
	bin := name
	if slices.Contains(toolbin.ControlPlaneComponents, name) {
		bin = toolbin.ControlPlaneBinary(name, c.KubernetesVersion)
	}
	return c.runBinary(name, c.Binaries.Path(bin), args, logDir)
}

// runBinary starts a component from bin and adds it to the cluster's processes.
func (c *Cluster) runBinary(name, bin string, args []string, logDir string) error {
	p, err := startProcess(name, bin, args, logDir)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

// StopComponent stops one component ("etcd", "kube-apiserver", "kube-controller-manager",
// "kube-scheduler" or "kwok") the way its pod is stopped (SIGTERM, SIGKILL after a grace period),
// for tests of what outlives it; Healthy does not count its exit. StartComponent starts it again.
func (c *Cluster) StopComponent(name string) error {
	p, _, err := c.component(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if p.stopped {
		c.mu.Unlock()
		return fmt.Errorf("%s is already stopped", name)
	}
	p.stopped = true
	c.mu.Unlock()
	p.stop(30 * time.Second)
	return nil
}

// StartComponent starts a component stopped by StopComponent again with the same arguments: the
// same ports, certificates and data folder. For etcd and the API server it returns once the API
// server (if running) answers /readyz again; the other components are not waited for.
func (c *Cluster) StartComponent(ctx context.Context, name string) error {
	old, i, err := c.component(name)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if !old.stopped {
		c.mu.Unlock()
		return fmt.Errorf("%s is running; stop it first", name)
	}
	p, err := old.restart()
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.procs[i] = p
	err = writePIDs(c.Dir, c.procs)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if name == "etcd" {
		if err := waitHTTP(ctx, c.etcdURL+"/health", nil, "etcd"); err != nil {
			return c.componentErr(err)
		}
		if api, _, err := c.component("kube-apiserver"); err != nil || c.isStopped(api) {
			return err
		}
	}
	if name == "etcd" || name == "kube-apiserver" {
		return c.componentErr(c.waitAPIServer(ctx))
	}
	return nil
}

func (c *Cluster) isStopped(p *process) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.stopped
}

// component returns the process of the named component and its index in c.procs.
func (c *Cluster) component(name string) (*process, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, p := range c.procs {
		if p.name == name {
			return p, i, nil
		}
	}
	return nil, 0, fmt.Errorf("the cluster runs no component %q", name)
}

// componentErr prefers "kube-apiserver exited, see its log" over the time-out it caused.
func (c *Cluster) componentErr(err error) error {
	if exited := c.Healthy(); exited != nil {
		return fmt.Errorf("%w (%w)", exited, err)
	}
	return err
}

// Healthy returns an error naming the first component that has exited.
func (c *Cluster) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if err := p.exitedErr(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig(server string, pki *pkiFiles) error {
	c.KubeconfigPath = filepath.Join(c.Dir, "kubeconfig")
	const name = "daemonguard-local"
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{name: {Server: server, CertificateAuthorityData: pki.CACertPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {ClientCertificateData: pki.AdminCertPEM, ClientKeyData: pki.AdminKeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{name: {Cluster: name, AuthInfo: name, Namespace: metav1.NamespaceDefault}},
		CurrentContext: name,
	}
	if err := clientcmd.WriteToFile(kc, c.KubeconfigPath); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	restCfg, err := clientcmd.NewNonInteractiveClientConfig(kc, name, nil, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("build client config: %w", err)
	}
	restCfg.QPS, restCfg.Burst = 500, 1000
	c.RESTConfig = restCfg
	c.Client, err = kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("build client: %w", err)
	}
	return nil
}

const pollInterval = 100 * time.Millisecond

func waitHTTP(ctx context.Context, url string, tlsConfig *tls.Config, what string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	var last error
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("%s answered %s", url, resp.Status)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s to be healthy: %w (last: %v)", what, err, last)
	}
	return nil
}

// ControllerManagerMetrics is kube-controller-manager's /metrics (Prometheus text), read with the
// admin client certificate, which its delegated authorization allows: its workqueues' counters
// say how often and how long each controller synced.
func (c *Cluster) ControllerManagerMetrics(ctx context.Context) ([]byte, error) {
	cert, err := tls.X509KeyPair(c.pki.AdminCertPEM, c.pki.AdminKeyPEM)
	if err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}} //nolint:gosec // self-signed, on loopback
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.kcmURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read kube-controller-manager's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read kube-controller-manager's metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("kube-controller-manager's /metrics answered %s: %s", resp.Status, body)
	}
	return body, nil
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return c.waitUntil(ctx, "kube-apiserver /readyz", func(ctx context.Context) error {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Raw()
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	})
}

// waitUntil polls check until it succeeds, failing early when a component has exited.
func (c *Cluster) waitUntil(ctx context.Context, what string, check func(ctx context.Context) error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		last = check(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w (last: %v)", what, err, last)
	}
	return nil
}

func (c *Cluster) waitServiceAccount(ctx context.Context, namespace string) error {
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts(namespace).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("wait for the default ServiceAccount in %s (kube-controller-manager): %w", namespace, err)
	}
	return nil
}

// NodeAgentLabels mark a namespace for node agents (admission.NodeAgentsLabel, written out here so
// that the demo's program does not link the policy engine; TestNodeAgentLabels holds the two
// together): the namespaces the tests and benchmarks create hold node agents, as an
// administrator's would, unless a test plays a tenant (NewTenantNamespace).
var NodeAgentLabels = map[string]string{"daemonguard.io/node-agents": "true"}

// CreateNamespace creates a namespace marked for node agents (NodeAgentLabels), unless it exists,
// and waits until pods can be created in it.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: NodeAgentLabels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return c.waitServiceAccount(ctx, name)
}

// Stop terminates every component and removes the cluster folder. It is safe to call more than once.
func (c *Cluster) Stop() {
	c.stopOnce.Do(func() { c.stop(true) })
}

// StopKeepLogs terminates every component but keeps the folder for post-mortem reading.
func (c *Cluster) StopKeepLogs() {
	c.stopOnce.Do(func() { c.stop(false) })
}

func (c *Cluster) stop(removeDir bool) {
	c.mu.Lock()
	procs := c.procs
	c.mu.Unlock()
	// Reverse start order: clients of the apiserver first, etcd last, so nobody logs a storm of
	// connection errors on the way down.
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(5 * time.Second)
	}
	if c.node != nil {
		c.cleanUpRealNode()
	}
	if removeDir {
		_ = os.RemoveAll(c.Dir)
	} else {
		_ = os.Remove(filepath.Join(c.Dir, pidFileName))
	}
}

// Env returns the environment that points kubectl, helm and client-go at this cluster.
func (c *Cluster) Env() []string {
	return append(os.Environ(), "KUBECONFIG="+c.KubeconfigPath)
}

// PIDs returns the process ids of the running components, for tests that prove nothing survives.
func (c *Cluster) PIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	pids := make([]int, 0, len(c.procs))
	for _, p := range c.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	return pids
}
