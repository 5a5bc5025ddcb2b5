package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/daemonguard/daemonguard/internal/selftls"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/webhook"
)

// release is one helm release of the chart, in URL mode.
type release struct {
	*harness.Release
	t *testing.T
	// webhookPort is the loopback port the chart's URL-mode webhook configurations point at.
	webhookPort int
}

// scraper is the ServiceAccount, in the release namespace, that installChart binds to the chart's
// ClusterRole <fullname>-metrics-reader (metrics.reader.subjects): the identity of a Prometheus.
const scraper = "scraper"

// installChart creates the release namespace with the restricted Pod Security level enforced (the
// chart's pods must pass it) and the ServiceAccount scraper, and installs the chart in URL mode:
// the webhook configurations point at a daemonguard binary on the host.
func installChart(t *testing.T, name string, sets ...string) *release {
	t.Helper()
	r, out, err := tryInstallChart(t, name, sets...)
	if err != nil {
		t.Fatalf("helm install %s: %v\n%s", name, err, out)
	}
	return r
}

// tryInstallChart is installChart that returns helm's output and error, for an install that
// must fail.
func tryInstallChart(t *testing.T, name string, sets ...string) (*release, string, error) {
	t.Helper()
	localcluster.NeedCluster(t)
	ctx := context.Background()
	ns := name + "-system"
	_, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	if err := harness.GrantGet(ctx, cluster.Client, ns, scraper); err != nil {
		t.Fatal(err)
	}
	r := &release{Release: harness.NewRelease(cluster, name, ns, t.TempDir()), t: t, webhookPort: harness.FreePort(t)}
	args := []string{"install", name, chartDir(t), "--namespace", ns, "--wait", "--timeout", "3m",
		"--set", "webhook.url=https://127.0.0.1:" + strconv.Itoa(r.webhookPort),
		"--set", "tls.ipAddresses={127.0.0.1}",
		"--set", "metrics.reader.subjects[0].kind=ServiceAccount", "--set", "metrics.reader.subjects[0].name=" + scraper}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	out, err := r.Helm(args...)
	t.Cleanup(func() {
		// Uninstalling first takes the webhook configurations away, so a failed test leaves
		// nothing behind that rejects the next test's DaemonSets.
		_, _ = r.Helm("uninstall", name, "--namespace", ns, "--wait")
	})
	return r, out, err
}

// in returns the release failing through t, a subtest's, so that a failure ends that subtest
// and not its parent.
func (r *release) in(t *testing.T) *release {
	c := *r
	c.t = t
	return &c
}

func (r *release) helm(args ...string) string {
	r.t.Helper()
	out, err := r.Helm(args...)
	if err != nil {
		r.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// object returns the release's only object of kind whose name ends in suffix.
func (r *release) object(kind, suffix string) *unstructured.Unstructured {
	r.t.Helper()
	return r.Object(r.t, kind, suffix)
}

// webhookConfigurationName is the name the chart gives both webhook configurations.
func (r *release) webhookConfigurationName() string {
	return r.object("MutatingWebhookConfiguration", "").GetName()
}

// runComponent runs the daemonguard binary as the release's Deployment named *-<suffix> (see
// harness.RunComponent): with its arguments and ServiceAccount, so the chart's RBAC is proven.
func (r *release) runComponent(suffix string, overrides ...string) *harness.Component {
	r.t.Helper()
	return harness.RunComponent(r.t, cluster, r.Deployment(r.t, suffix), overrides...)
}

// token returns a new token of the ServiceAccount name in the release namespace.
func (r *release) token(name string) string {
	r.t.Helper()
	token, err := harness.Token(context.Background(), cluster.Client, r.Namespace, name)
	if err != nil {
		r.t.Fatal(err)
	}
	return token
}

// webhookMetricsTLS is how the chart's ServiceMonitor verifies the webhook's metrics server:
// against the CA certificate it reads (webhookMetricsCA), under the webhook Service's name.
func (r *release) webhookMetricsTLS() *tls.Config {
	r.t.Helper()
	caPEM, serverName := r.webhookMetricsCA()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		r.t.Fatal("the webhook's CA has no certificate in ca.crt")
	}
	return &tls.Config{RootCAs: pool, ServerName: serverName}
}

// webhookMetricsCA returns what webhookMetricsTLS verifies with, as the ServiceMonitor reads it:
// with self-managed TLS ca.crt of the ConfigMap <fullname>-webhook-ca, which the webhook fills
// with the bundle alone (the TLS Secret also holds the CA's key); with cert-manager ca.crt of the
// serving certificate's Secret. And the name the certificate must cover.
func (r *release) webhookMetricsCA() (caPEM []byte, serverName string) {
	r.t.Helper()
	ctx := context.Background()
	webhook := r.object("Deployment", "webhook").GetName()
	serverName = r.object("Service", "-webhook").GetName() + "." + r.Namespace + ".svc"
	if _, err := cluster.Client.CoreV1().ConfigMaps(r.Namespace).Get(ctx, webhook+"-ca", metav1.GetOptions{}); err == nil {
		cluster.WaitFor(r.t, time.Minute, "the webhook writes ca.crt into ConfigMap "+webhook+"-ca", func(ctx context.Context) (bool, string) {
			cm, err := cluster.Client.CoreV1().ConfigMaps(r.Namespace).Get(ctx, webhook+"-ca", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			caPEM = []byte(cm.Data["ca.crt"])
			return len(caPEM) > 0, fmt.Sprintf("data keys %d", len(cm.Data))
		})
		return caPEM, serverName
	}
	s, err := cluster.Client.CoreV1().Secrets(r.Namespace).Get(ctx, webhook+"-tls", metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	if len(s.Data["ca.crt"]) == 0 {
		r.t.Fatalf("secret %s-tls has no ca.crt", webhook)
	}
	return s.Data["ca.crt"], serverName
}

// runWebhook runs a webhook replica serving on port with its own cert dir.
func (r *release) runWebhook(port int, extra ...string) *harness.Component {
	return r.runComponent("webhook", append([]string{"--host=127.0.0.1", "--port=" + strconv.Itoa(port),
		"--cert-dir=" + r.t.TempDir()}, extra...)...)
}

// waitAdmission waits until a server-side dry-run create in ns comes back mutated: the API server
// reached the webhook over TLS with the CA it was given.
func waitAdmission(t *testing.T, ns string) {
	t.Helper()
	cluster.WaitFor(t, 2*time.Minute, "the API server calls the webhook", func(ctx context.Context) (bool, string) {
		got, err := dryRunDaemonSet(ctx, cluster.Client, ns, "probe")
		if err != nil {
			return false, err.Error()
		}
		return got.Spec.Template.Spec.PriorityClassName != "", "not mutated"
	})
}

func dryRunDaemonSet(ctx context.Context, client kubernetes.Interface, ns, name string) (*appsv1.DaemonSet, error) {
	return client.AppsV1().DaemonSets(ns).Create(ctx, agentDaemonSet(name), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// assertNoDrift applies the demo DaemonSets and checks that kubectl diff --server-side, which is
// what Argo CD's server-side diff does, finds nothing: the mutation is idempotent and dry-run
// sees exactly what the real write stored.
func assertNoDrift(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	for _, path := range []string{clustertest.SeedManifest(t), toolbin.RepoPath(t, "testdata", "demo-rollout", "node-agent.yaml")} {
		clustertest.Kubectl(t, cluster, "", "apply", "--server-side", "-n", ns, "-f", path)
		// kubectl diff compares a live read with a dry-run apply made a moment later; a status
		// still changing between the two would show up as a difference that is not drift.
		waitSettled(t, ns)
		out, stderr, err := cluster.Kubectl(ctx, "", "diff", "--server-side", "-n", ns, "-f", path)
		if err != nil || out != "" {
			t.Errorf("kubectl diff --server-side -f %s reports drift after apply (err %v):\n%s%s", path, err, out, stderr)
		}
	}
	ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, "nginx-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasToleration(ds.Spec.Template.Spec.Tolerations, "node-role.kubernetes.io/control-plane") {
		t.Errorf("nginx-ds was stored without the injected control-plane toleration: %+v", ds.Spec.Template.Spec.Tolerations)
	}
}

// waitSettled waits until every DaemonSet in ns has been observed and has all its pods available.
func waitSettled(t *testing.T, ns string) {
	t.Helper()
	cluster.WaitFor(t, 2*time.Minute, "DaemonSets settle", func(ctx context.Context) (bool, string) {
		list, err := cluster.Client.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, ds := range list.Items {
			st := ds.Status
			if st.ObservedGeneration != ds.Generation || st.DesiredNumberScheduled == 0 ||
				st.NumberAvailable != st.DesiredNumberScheduled || st.UpdatedNumberScheduled != st.DesiredNumberScheduled {
				return false, fmt.Sprintf("%s: %+v", ds.Name, st)
			}
		}
		return true, ""
	})
}

func hasToleration(ts []corev1.Toleration, key string) bool {
	for _, t := range ts {
		if t.Key == key {
			return true
		}
	}
	return false
}

// servedCertificate returns the leaf a webhook replica serves right now.
func servedCertificate(addr string) (*x509.Certificate, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // we inspect the certificate, not trust it
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func bundleOf(t *testing.T, pemBytes []byte) []*x509.Certificate {
	t.Helper()
	var cas []*x509.Certificate
	rest := pemBytes
	for len(bytes.TrimSpace(rest)) > 0 {
		c, r, err := decodePEMCert(rest)
		if err != nil {
			t.Fatalf("bad CA bundle: %v", err)
		}
		cas, rest = append(cas, c), r
	}
	return cas
}

// admissionLoad sends server-side dry-run DaemonSet creates through the API server (and so
// through the webhooks) from several workers until stopped, counting every outcome.
type admissionLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	firstErr   error
	stop       chan struct{}
	once       sync.Once
	wg         sync.WaitGroup
}

func startAdmissionLoad(t *testing.T, ns string, workers int) *admissionLoad {
	t.Helper()
	// A client of its own, so the load never starves the test's polling of rate-limiter tokens.
	cfg := rest.CopyConfig(cluster.RESTConfig)
	cfg.QPS, cfg.Burst = 1000, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &admissionLoad{stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			// Each worker sends at most 25 requests a second: steady load, CPU left for the rest.
			pace := time.NewTicker(40 * time.Millisecond)
			defer pace.Stop()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-pace.C:
				}
				got, err := dryRunDaemonSet(context.Background(), client, ns, fmt.Sprintf("load-%d-%d", w, i))
				if err == nil && got.Spec.Template.Spec.PriorityClassName == "" {
					err = errors.New("admitted without mutation")
				}
				if err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					if l.firstErr == nil {
						l.firstErr = err
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	return l
}

// waitFlowing waits until the load has had some requests admitted.
func (l *admissionLoad) waitFlowing(t *testing.T) {
	t.Helper()
	cluster.WaitFor(t, 30*time.Second, "load is flowing", func(context.Context) (bool, string) {
		return l.ok.Load() >= 20, fmt.Sprintf("%d ok, %d failed", l.ok.Load(), l.failed.Load())
	})
}

// finish keeps the load on for a few more admitted requests (the API server must keep reaching the
// webhook after the change), stops it and fails the test for every failed request.
func (l *admissionLoad) finish(t *testing.T, during string) {
	t.Helper()
	after := l.ok.Load()
	cluster.WaitFor(t, 30*time.Second, "load continues after "+during, func(context.Context) (bool, string) {
		return l.ok.Load() >= after+20, fmt.Sprintf("%d ok, %d failed", l.ok.Load(), l.failed.Load())
	})
	l.Stop()
	t.Logf("admission requests during %s: %d ok, %d failed", during, l.ok.Load(), l.failed.Load())
	if n := l.failed.Load(); n > 0 {
		t.Errorf("%d admission requests failed during %s; first: %v", n, during, l.firstErr)
	}
}

// Stop ends the load and waits for the workers; calling it again does nothing.
func (l *admissionLoad) Stop() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// TestSelfManagedTLS installs the chart without cert-manager. Two webhook replicas on the host,
// running as the chart's ServiceAccount, create the CA and serving certificate in one Secret and
// write the CA bundle into the chart's webhook configurations; the API server then calls them over
// TLS. A forced CA rotation under admission load fails no request; a helm upgrade keeps the CA
// bundle; the controller, also on the chart's ServiceAccount, completes a managed rollout.
func TestSelfManagedTLS(t *testing.T) {
	ctx := context.Background()
	// Injection by the webhook: waitAdmission tells by the mutation that the API server reached it.
	r := installChart(t, "dg-self", "webhook.inProcessInjection=false")
	secretName := r.object("Deployment", "webhook").GetName() + "-tls"
	configName := r.webhookConfigurationName()

	// Self-managed mode is the chart's default; the propagation grace is shortened for the test.
	grace := "--tls-propagation-grace=3s"
	altPort := harness.FreePort(t)
	r.runWebhook(r.webhookPort, grace)
	r.runWebhook(altPort, grace)
	ns := cluster.NewTestNamespace(t)
	waitAdmission(t, ns)

	secret, err := cluster.Client.CoreV1().Secrets(r.Namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook did not create its TLS secret %s: %v", secretName, err)
	}
	firstCAs := bundleOf(t, secret.Data[selftls.KeyCABundle])
	if len(firstCAs) != 1 {
		t.Fatalf("a fresh install trusts %d CAs, want 1", len(firstCAs))
	}
	for _, addr := range []string{"127.0.0.1:" + strconv.Itoa(r.webhookPort), "127.0.0.1:" + strconv.Itoa(altPort)} {
		leaf, err := servedCertificate(addr)
		if err != nil {
			t.Fatal(err)
		}
		if err := leaf.CheckSignatureFrom(firstCAs[0]); err != nil {
			t.Errorf("replica %s serves a certificate the published CA did not sign: %v", addr, err)
		}
	}

	t.Run("no drift after apply", func(t *testing.T) { assertNoDrift(t, ns) })

	t.Run("forced CA rotation under load fails no admission request", func(t *testing.T) {
		cluster.WaitFor(t, 10*time.Second, "the CA is older than a rotation request made now", func(context.Context) (bool, string) {
			return time.Now().Truncate(time.Second).After(firstCAs[0].NotBefore), ""
		})
		load := startAdmissionLoad(t, ns, 4)
		defer load.Stop()
		load.waitFlowing(t)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, selftls.AnnotationRotateRequestedAt, time.Now().UTC().Format(time.RFC3339))
		clustertest.Kubectl(t, cluster, "", "patch", "secret", secretName, "-n", r.Namespace, "--type=merge", "-p", patch)
		sawBoth := false
		var newCA *x509.Certificate
		cluster.WaitFor(t, 2*time.Minute, "the rotation completes", func(ctx context.Context) (bool, string) {
			s, err := cluster.Client.CoreV1().Secrets(r.Namespace).Get(ctx, secretName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cas := bundleOf(t, s.Data[selftls.KeyCABundle])
			if len(cas) == 2 {
				sawBoth = true
			}
			if len(cas) != 1 || cas[0].Equal(firstCAs[0]) {
				return false, fmt.Sprintf("bundle has %d CAs", len(cas))
			}
			newCA = cas[0]
			for _, port := range []int{r.webhookPort, altPort} {
				leaf, err := servedCertificate("127.0.0.1:" + strconv.Itoa(port))
				if err != nil {
					return false, err.Error()
				}
				if leaf.CheckSignatureFrom(newCA) != nil {
					return false, fmt.Sprintf("port %d still serves a certificate from the old CA", port)
				}
			}
			m, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, w := range m.Webhooks {
				if !bytes.Equal(w.ClientConfig.CABundle, s.Data[selftls.KeyCABundle]) {
					return false, "webhook configuration still has the old bundle"
				}
			}
			return true, ""
		})
		// The API server must keep reaching the webhook with only the new CA trusted.
		load.finish(t, "the rotation")
		if !sawBoth {
			t.Errorf("the bundle never held the old and the new CA together: the rotation was not staged")
		}
	})

	t.Run("helm upgrade keeps the CA bundle the webhook wrote", func(t *testing.T) {
		r.helm("upgrade", r.Name, chartDir(t), "--namespace", r.Namespace, "--reuse-values", "--set", "webhook.timeoutSeconds=7", "--wait", "--timeout", "3m")
		m, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range m.Webhooks {
			if len(w.ClientConfig.CABundle) == 0 {
				t.Errorf("webhook %s lost its caBundle in the upgrade", w.Name)
			}
			want := int32(7)
			if w.Name == "pods.mutate.daemonguard.io" {
				want = webhook.PodPinTimeoutSeconds // fixed: webhook.timeoutSeconds is the DaemonSet webhooks'
			}
			if w.TimeoutSeconds == nil || *w.TimeoutSeconds != want {
				t.Errorf("webhook %s timeoutSeconds = %v after upgrade, want %d", w.Name, w.TimeoutSeconds, want)
			}
		}
		waitAdmission(t, ns)
	})

	t.Run("the ServiceMonitor's ConfigMap holds the bundle alone, rotated and kept by an upgrade", func(t *testing.T) {
		name := r.object("Deployment", "webhook").GetName() + "-ca"
		cluster.WaitFor(t, time.Minute, "ConfigMap "+name+" holds the Secret's bundle", func(ctx context.Context) (bool, string) {
			s, err := cluster.Client.CoreV1().Secrets(r.Namespace).Get(ctx, secretName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cm, err := cluster.Client.CoreV1().ConfigMaps(r.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			for k, v := range cm.Data {
				if strings.Contains(v, "PRIVATE KEY") || k == selftls.KeyCAKey {
					t.Fatalf("ConfigMap %s holds a private key under %s", name, k)
				}
			}
			return cm.Data[selftls.KeyCABundle] == string(s.Data[selftls.KeyCABundle]) && len(cm.Data) == 1, fmt.Sprintf("ConfigMap keys %d", len(cm.Data))
		})
	})

	t.Run("controller with the chart's RBAC completes a managed rollout", func(t *testing.T) {
		r.runComponent("controller")
		clustertest.Kubectl(t, cluster, "", "-n", ns, "set", "image", "ds/node-agent", "agent=registry.example/node-agent:2.0")
		status := exec.Command(harness.Binary(t, cluster), "rollout", "status", "ds/node-agent", "-n", ns, "--timeout", "3m")
		status.Env = cluster.Env()
		out, err := status.CombinedOutput()
		if err != nil {
			t.Fatalf("daemonguard rollout status: %v\n%s", err, out)
		}
	})

	t.Run("a policy ConfigMap from values is hot-reloaded and enforced", func(t *testing.T) {
		values := filepath.Join(t.TempDir(), "policies.yaml")
		err := os.WriteFile(values, []byte(`policies:
  configMaps:
    team-limits:
      files:
        parameters.yaml: |
          policies:
            revision_history:
              default:
                minReadySeconds: 10
`), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dryRunDaemonSet(ctx, cluster.Client, ns, "before"); err != nil {
			t.Fatalf("minReadySeconds 0 is denied before the policy ConfigMap exists: %v", err)
		}
		r.helm("upgrade", r.Name, chartDir(t), "--namespace", r.Namespace, "--reuse-values", "-f", values, "--wait", "--timeout", "3m")
		cluster.WaitFor(t, time.Minute, "the webhook enforces the new parameter", func(ctx context.Context) (bool, string) {
			_, err := dryRunDaemonSet(ctx, cluster.Client, ns, "after")
			if err == nil {
				return false, "still admitted"
			}
			return strings.Contains(err.Error(), "revision_history") && strings.Contains(err.Error(), "minReadySeconds"), err.Error()
		})
	})

	t.Run("uninstall removes the webhook configurations", func(t *testing.T) {
		r.helm("uninstall", r.Name, "--namespace", r.Namespace, "--wait")
		_, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("validating webhook configuration after uninstall: %v", err)
		}
		if _, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, configName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("mutating webhook configuration after uninstall: %v", err)
		}
	})
}

// TestCertManagerTLS installs the chart with certManager.enabled=true next to cert-manager's own
// issuing controllers and cainjector: the chart's Issuers issue the serving certificate, the
// cainjector puts the CA into the chart's webhook configurations, and the API server calls the
// webhook over TLS through it; its metrics server serves the same certificate, which the chart's
// ServiceMonitor verifies with the Secret's ca.crt. A renewal under admission load is reloaded from
// disk without a restart and fails no request.
func TestCertManagerTLS(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	if _, err := cluster.StartCertManager(ctx); err != nil {
		t.Fatal(err)
	}
	r := installChart(t, "dg-cm", "certManager.enabled=true", "webhook.inProcessInjection=false")
	certName := r.object("Certificate", "webhook-tls").GetName()
	configName := r.webhookConfigurationName()
	certDir := t.TempDir()
	harness.MountSecret(t, cluster, r.Namespace, certName, certDir)

	cluster.WaitFor(t, 2*time.Minute, "the cainjector injects the CA", func(ctx context.Context) (bool, string) {
		s, err := cluster.Client.CoreV1().Secrets(r.Namespace).Get(ctx, certName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		bundles, err := harness.CABundles(ctx, cluster.Client, configName)
		if err != nil {
			return false, err.Error()
		}
		for _, b := range bundles {
			if len(b) == 0 || !bytes.Equal(b, s.Data["ca.crt"]) {
				return false, "caBundle not injected yet"
			}
		}
		return true, ""
	})
	web := r.runComponent("webhook", "--host=127.0.0.1", "--port="+strconv.Itoa(r.webhookPort), "--cert-dir="+certDir)
	ns := cluster.NewTestNamespace(t)
	waitAdmission(t, ns)

	t.Run("metrics served with the issued certificate, as the ServiceMonitor verifies it", func(t *testing.T) {
		code, body, err := harness.Scrape(ctx, "https://"+web.MetricsAddr+serving.MetricsPath, r.token(scraper), r.webhookMetricsTLS())
		if err != nil || code != http.StatusOK {
			t.Fatalf("HTTP %d (%v): %.300s", code, err, body)
		}
	})

	t.Run("no drift after apply", func(t *testing.T) { assertNoDrift(t, ns) })

	t.Run("a renewal under load is reloaded without restart and fails no request", func(t *testing.T) {
		addr := "127.0.0.1:" + strconv.Itoa(r.webhookPort)
		before, err := servedCertificate(addr)
		if err != nil {
			t.Fatal(err)
		}
		load := startAdmissionLoad(t, ns, 4)
		defer load.Stop()
		load.waitFlowing(t)
		// What `cmctl renew` does: set the Issuing condition, which cert-manager's trigger honours.
		patch := `[{"op":"add","path":"/status/conditions/-","value":{"type":"Issuing","status":"True","reason":"ManuallyTriggered","message":"renewal requested by the install e2e"}}]`
		clustertest.Kubectl(t, cluster, "", "patch", "certificate", certName, "-n", r.Namespace, "--subresource=status", "--type=json", "-p", patch) // request renewal
		cluster.WaitFor(t, 2*time.Minute, "the webhook serves the renewed certificate", func(context.Context) (bool, string) {
			now, err := servedCertificate(addr)
			if err != nil {
				return false, err.Error()
			}
			return !now.Equal(before), "still the certificate served before the renewal"
		})
		load.finish(t, "the renewal")
		if err := web.Proc.Exited(); err != nil {
			t.Errorf("the webhook restarted or died during the renewal: %v", err)
		}
	})
}
