// Package harness runs daemonguard's own components against a local cluster the way the API
// server meets them in production: the webhook server in this process, over TLS on loopback,
// registered through real MutatingWebhookConfiguration and ValidatingWebhookConfiguration objects.
// The demo and the integration tests share it.
package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/localcluster"
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
	// inProcess: the caller's in-process injection policy mutates DaemonSets, so whether the
	// API server still calls the webhook cannot be told by a DaemonSet's mutation.
	inProcess bool
	stop      context.CancelFunc
	done      chan error
}

// Stop takes the webhook configurations out of the cluster, waits until the API server no longer
// calls the webhook (with failurePolicy Fail, a configuration left behind would reject every later
// DaemonSet write of the tests sharing the cluster), then shuts the server down and waits for it.
func (w *Webhook) Stop() {
	if w.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := unregister(ctx, w.cluster, !w.inProcess); err != nil {
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

// unregister deletes the webhook configurations and, when wait, waits until they are out of force.
func unregister(ctx context.Context, c *localcluster.Cluster, wait bool) error {
	adm := c.Client.AdmissionregistrationV1()
	if err := adm.MutatingWebhookConfigurations().Delete(ctx, configurationName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("unregister mutating webhook: %w", err)
	}
	if err := adm.ValidatingWebhookConfigurations().Delete(ctx, configurationName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("unregister validating webhook: %w", err)
	}
	if !wait {
		return nil
	}
	return waitMutated(ctx, c, false)
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
	w := &Webhook{URL: "https://127.0.0.1:" + strconv.Itoa(port), LogPath: logPath, CABundle: caBundle, inProcess: opts.InProcessInjection, stop: cancel, done: make(chan error, 1)}
	log := zap.New(zap.WriteTo(logFile))
	ctrl.SetLogger(log) // controller-runtime's global logger; the webhook is this process's only user
	go func() {
		defer logFile.Close()
		w.done <- webhookserver.Run(runCtx, webhookserver.Options{
			RESTConfig: c.RESTConfig, Namespace: WebhookNamespace,
			Host: "127.0.0.1", Port: port, CertDir: certDir,
			MetricsAddr: "0", HealthAddr: "0", FailureMode: webhook.FailClosed,
			AuditInterval: opts.AuditInterval, OpenReports: opts.OpenReports, LeaderElection: true,
			Log: log,
		})
	}()
	if err := w.waitTLS(ctx, caBundle); err != nil {
		w.Stop()
		return nil, err
	}

	mutating, validating := webhook.Configurations(webhook.ConfigurationOptions{
		Name: configurationName, URL: w.URL, CABundle: caBundle, Namespace: WebhookNamespace,
		InProcessInjection: opts.InProcessInjection,
	})
	// Configurations left by a run that died before its Stop point at a server that is gone.
	if err := unregister(ctx, c, !opts.InProcessInjection); err != nil {
		w.Stop()
		return nil, err
	}
	w.cluster = c
	adm := c.Client.AdmissionregistrationV1()
	if _, err := adm.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		w.Stop()
		return nil, fmt.Errorf("register mutating webhook: %w", err)
	}
	if _, err := adm.ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		w.Stop()
		return nil, fmt.Errorf("register validating webhook: %w", err)
	}
	if err := waitMutated(ctx, c, true); err != nil {
		w.Stop()
		return nil, err
	}
	return w, nil
}

// waitTLS waits until the server completes a TLS handshake with the certificate the API server
// will be told to trust.
func (w *Webhook) waitTLS(ctx context.Context, caBundle []byte) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	addr := w.URL[len("https://"):]
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := w.Running(); err != nil {
			return false, fmt.Errorf("%w (log: %s)", err, w.LogPath)
		}
		conn, err := (&tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return false, nil
		}
		conn.Close()
		return true, nil
	})
}

// configurationName names both webhook configurations the harness registers.
const configurationName = "daemonguard"

// waitMutated waits until the API server, which loads webhook configurations asynchronously,
// mutates a server-side dry-run create (registered is true) or stops mutating it (false).
func waitMutated(ctx context.Context, c *localcluster.Cluster, registered bool) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		mutated, err := Mutates(ctx, c)
		return err == nil && mutated == registered, nil
	})
	switch {
	case err != nil && registered:
		return fmt.Errorf("the API server never called the webhook: %w", err)
	case err != nil:
		return fmt.Errorf("the API server still calls the unregistered webhook: %w", err)
	}
	return nil
}

// Mutates tells whether a DaemonSet written now gets the webhook's injection, by a server-side
// dry-run create in the default namespace (no object is stored, no pods start).
func Mutates(ctx context.Context, c *localcluster.Cluster) (bool, error) {
	probe := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "daemonguard-probe"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe:1"}}},
			},
		},
	}
	got, err := c.Client.AppsV1().DaemonSets(metav1.NamespaceDefault).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return false, fmt.Errorf("dry-run create a DaemonSet: %w", err)
	}
	return got.Spec.Template.Spec.PriorityClassName != "", nil
}
