// Package harness runs daemonguard's own components against a local cluster the way the API
// server meets them in production: the webhook server in this process, over TLS on loopback,
// registered through real MutatingWebhookConfiguration and ValidatingWebhookConfiguration objects.
// The demo and the integration tests share it.
package harness

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/webhookreg"
	"github.com/daemonguard/daemonguard/webhook"
)

// WebhookNamespace is the namespace the harness runs daemonguard "in": exempt from admission and
// home of the policy ConfigMaps.
const WebhookNamespace = "daemonguard-system"

// Options tune the webhook the harness starts.
type Options struct {
	// AuditInterval is the period of the in-process audit; 0 turns it off.
	AuditInterval time.Duration
	// OpenReports makes the audit write OpenReports Reports.
	OpenReports bool
	// InProcessInjection registers no DaemonSet mutating webhook: the caller has registered the
	// in-process injection policy (internal/inprocess) before, which the start waits on instead.
	InProcessInjection bool
}

// Webhook is a running webhook server registered with a cluster.
type Webhook struct {
	URL     string
	LogPath string
	// CABundle is the PEM of the CA that signed the server's certificate, as the API server
	// is told to trust it.
	CABundle []byte
	cluster  *localcluster.Cluster
	// registration is what was registered: the probes ask for its webhooks.
	registration webhook.ConfigurationOptions
	stop         context.CancelFunc
	done         chan error
}

// Stop takes the webhook configurations out of the cluster, waits until the API server no longer
// calls the webhook (with failurePolicy Fail, a configuration left behind would reject every later
// DaemonSet write of the tests sharing the cluster), then shuts the server down and waits for it.
func (w *Webhook) Stop() {
	if w.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := unregister(ctx, w.cluster, w.registration); err != nil {
			fmt.Fprintf(os.Stderr, "harness: %v\n", err)
		}
	}
	w.stop()
	<-w.done
}

// Running returns nil while the webhook server runs, and an error with what it returned once it
// has stopped on its own.
func (w *Webhook) Running() error {
	return running("webhook server", w.done)
}

// unregister deletes the webhook configurations and waits until they are out of force.
func unregister(ctx context.Context, c *localcluster.Cluster, opts webhook.ConfigurationOptions) error {
	if err := webhookreg.Unregister(ctx, c.Client, opts.Name); err != nil {
		return err
	}
	return webhookreg.WaitCalled(ctx, c.Client, opts, false)
}

// StartWebhook starts the webhook server against c, waits until it serves TLS, registers the
// webhook configurations and waits until the API server calls it. Its log goes to
// <cluster dir>/logs/daemonguard-webhook.log.
func StartWebhook(ctx context.Context, c *localcluster.Cluster, opts Options) (*Webhook, error) {
	if err := c.CreateNamespace(ctx, WebhookNamespace); err != nil {
		return nil, err
	}
	certDir, caBundle, port, err := ServingEndpoint(c, "webhook-tls")
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(c.Dir, "logs", "daemonguard-webhook.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}

	runCtx, cancel := context.WithCancel(context.Background())
	addr := "127.0.0.1:" + strconv.Itoa(port)
	w := &Webhook{
		URL: "https://" + addr, LogPath: logPath, CABundle: caBundle, stop: cancel, done: make(chan error, 1),
		registration: webhook.ConfigurationOptions{
			Name: configurationName, URL: "https://" + addr, CABundle: caBundle, Namespace: WebhookNamespace,
			InProcessInjection: opts.InProcessInjection,
		},
	}
	log := zap.New(zap.WriteTo(logFile))
	ctrl.SetLogger(log) // controller-runtime's global logger; the webhook is this process's only user
	go func() {
		defer logFile.Close()
		w.done <- webhookserver.Run(runCtx, webhookserver.Options{
			RESTConfig: c.RESTConfig, Namespace: WebhookNamespace,
			Host: "127.0.0.1", Port: port, CertDir: certDir,
			MetricsAddr: "0", HealthAddr: "0", FailureMode: admission.FailClosed,
			AuditInterval: opts.AuditInterval, OpenReports: opts.OpenReports, LeaderElection: true,
			Log: log,
		})
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	if err := webhookreg.WaitTLS(ctx, addr, pool, w.done); err != nil {
		w.Stop()
		return nil, fmt.Errorf("%w (log: %s)", err, logPath)
	}
	// Configurations left by a run that died before its Stop point at a server that is gone:
	// Register replaces them, and the wait below is for this server's.
	w.cluster = c
	if err := webhookreg.Register(ctx, c.Client, w.registration); err != nil {
		w.Stop()
		return nil, err
	}
	if err := webhookreg.WaitCalled(ctx, c.Client, w.registration, true); err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

// configurationName names both webhook configurations the harness registers.
const configurationName = "daemonguard"

// Mutates tells whether a DaemonSet written now gets the webhook's injection, by a server-side
// dry-run create in webhookreg.ProbeNamespace (no object is stored, no pods start).
func Mutates(ctx context.Context, c *localcluster.Cluster) (bool, error) {
	if err := webhookreg.EnsureProbeNamespace(ctx, c.Client); err != nil {
		return false, err
	}
	got, err := c.Client.AppsV1().DaemonSets(webhookreg.ProbeNamespace).Create(ctx, webhookreg.ProbeDaemonSet(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, fmt.Errorf("dry-run create a DaemonSet: %w", err)
	}
	return got.Spec.Template.Spec.PriorityClassName != "", nil
}

// CABundles returns the caBundle of every webhook of the MutatingWebhookConfiguration and the
// ValidatingWebhookConfiguration named name, mutating first.
func CABundles(ctx context.Context, client kubernetes.Interface, name string) ([][]byte, error) {
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	bundles := [][]byte{}
	for _, w := range m.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for _, w := range v.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	return bundles, nil
}
