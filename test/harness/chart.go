package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/webhookreg"
)

// The chart's URL mode runs daemonguard outside the cluster: what follows plays the kubelet for
// the chart's Deployments, so tests run the real binary on the host with exactly the arguments,
// ServiceAccount and Secrets the chart (installed by helm or synced by Argo CD) gave the pods.

var binary struct {
	once sync.Once
	path string
	err  error
}

// Binary builds cmd/daemonguard once per test process, into the folder of the first cluster it is
// asked for, and returns its path: the components run as the real binary, parsing the very
// arguments the chart renders.
func Binary(t testing.TB, c *localcluster.Cluster) string {
	t.Helper()
	binary.once.Do(func() {
		root, err := toolbin.RepoRoot()
		if err != nil {
			binary.err = err
			return
		}
		bin := filepath.Join(c.Dir, "daemonguard")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/daemonguard")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binary.err = errors.New("go build ./cmd/daemonguard: " + err.Error() + "\n" + string(out))
			return
		}
		binary.path = bin
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// Component is a daemonguard component of the chart running on the host.
type Component struct {
	Proc *localcluster.HostProcess
	// HealthAddr serves /healthz and /readyz.
	HealthAddr string
	// MetricsAddr serves the metrics server's paths (MetricsPaths) over HTTPS, to a bearer token
	// allowed get on them (see Scrape).
	MetricsAddr string
}

// RunComponent runs the daemonguard binary with the arguments, the environment (ContainerEnv) and
// the ServiceAccount of dep (a Deployment of the chart), overriding only what a host process must
// (addresses, credentials, and overrides such as --port and --cert-dir), and waits until it is
// ready. Running with the chart's ServiceAccount token proves its RBAC is enough. It stops when
// the test ends.
func RunComponent(t testing.TB, c *localcluster.Cluster, dep *appsv1.Deployment, overrides ...string) *Component {
	t.Helper()
	return RunComponentBinary(t, c, Binary(t, c), dep, overrides...)
}

// RunComponentBinary is RunComponent with the daemonguard binary bin, e.g. one built from another
// commit to compare two builds.
func RunComponentBinary(t testing.TB, c *localcluster.Cluster, bin string, dep *appsv1.Deployment, overrides ...string) *Component {
	t.Helper()
	ctr := dep.Spec.Template.Spec.Containers[0]
	args := append(append([]string{}, ctr.Command...), ctr.Args...)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") && args[0] != "webhook" && args[0] != "controller" {
		args = args[1:] // the image's binary path
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "$(POD_NAMESPACE)", dep.Namespace)
	}
	env, err := ContainerEnv(ctr, dep.Namespace)
	if err != nil {
		t.Fatalf("%s: %v", dep.Name, err)
	}
	kubeconfig, err := c.ServiceAccountKubeconfig(context.Background(), dep.Namespace, dep.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	// Another test process may take a port between FreePort choosing it and the component binding
	// it; such a start is retried on other ports.
	const attempts = 5
	for attempt := 1; ; attempt++ {
		comp := &Component{HealthAddr: "127.0.0.1:" + strconv.Itoa(FreePort(t)), MetricsAddr: "127.0.0.1:" + strconv.Itoa(FreePort(t))}
		full := append(append([]string{}, args...), "--kubeconfig="+kubeconfig, "--health-probe-bind-address="+comp.HealthAddr,
			"--metrics-bind-address="+comp.MetricsAddr)
		full = append(full, overrides...)
		name := fmt.Sprintf("%s-%d", dep.Name, time.Now().UnixNano())
		comp.Proc, err = c.StartHostProcessEnv(name, bin, env, full...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(comp.Proc.Stop)
		t.Logf("started %s: daemonguard %s (log %s)", dep.Name, strings.Join(full, " "), comp.Proc.LogPath())
		c.WaitFor(t, 2*time.Minute, dep.Name+" ready", func(ctx context.Context) (bool, string) {
			if comp.Proc.Exited() != nil {
				return true, ""
			}
			return Ready(ctx, comp.HealthAddr)
		})
		exited := comp.Proc.Exited()
		if exited == nil {
			return comp
		}
		if !comp.Proc.LostPortRace() || attempt == attempts {
			t.Fatalf("%s exited: %v", dep.Name, exited)
		}
		t.Logf("%s lost a port to another process, starting it again on other ports", dep.Name)
	}
}

// Ready asks a daemonguard component's health probe server at addr whether it is ready, as the
// kubelet's readiness probe does; the string says why not (or the HTTP status).
func Ready(ctx context.Context, addr string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status
}

// MountSecret plays the kubelet's Secret volume for a component on the host: it waits until the
// Secret ns/name holds tls.crt and tls.key, writes them to dir, and again whenever the Secret
// changes, until the test ends.
func MountSecret(t testing.TB, c *localcluster.Cluster, ns, name, dir string) {
	t.Helper()
	sync := func(ctx context.Context) (bool, string) {
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(s.Data[corev1.TLSCertKey]) == 0 || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
			return false, "secret has no certificate yet"
		}
		for _, key := range []string{corev1.TLSPrivateKeyKey, corev1.TLSCertKey} {
			path := filepath.Join(dir, key)
			if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, s.Data[key]) {
				continue
			}
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, s.Data[key], 0o600); err != nil {
				return false, err.Error()
			}
			if err := os.Rename(tmp, path); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	}
	c.WaitFor(t, 2*time.Minute, "the serving certificate "+ns+"/"+name+" is issued", sync)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		// The kubelet refreshes Secret volumes periodically; a short period keeps tests quick.
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				sync(ctx)
			}
		}
	}()
}

// FreePort returns a loopback port free right now.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := webhookreg.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// ServingEndpoint prepares a webhook server on loopback: a serving certificate for 127.0.0.1
// from the cluster's CA, written as tls.crt and tls.key to <cluster dir>/<name>, the CA bundle
// that trusts it, and a port free right now.
func ServingEndpoint(c *localcluster.Cluster, name string) (certDir string, caBundle []byte, port int, err error) {
	certDir = filepath.Join(c.Dir, name)
	if caBundle, err = c.WriteServingCert(certDir); err != nil {
		return "", nil, 0, err
	}
	port, err = webhookreg.FreePort()
	return certDir, caBundle, port, err
}
