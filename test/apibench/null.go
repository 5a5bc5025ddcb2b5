package apibench

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"

	"k8s.io/client-go/kubernetes"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/loadgen"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/webhookreg"
	"github.com/daemonguard/daemonguard/webhook"
)

// nullConfiguration names the webhook configurations of the null webhook.
const nullConfiguration = "apibench-null"

// startNullWebhook serves a webhook that allows everything (controller-runtime's admission.Webhook,
// as daemonguard's endpoints are served) on daemonguard's paths, over TLS on loopback, and
// registers it with daemonguard's webhook configurations: what the API server pays to call any
// webhook, daemonguard's own work left out. stop unregisters it and waits until the API server no
// longer calls it.
func startNullWebhook(ctx context.Context, c *localcluster.Cluster, client kubernetes.Interface) (stop func() error, err error) {
	certDir, caBundle, port, err := harness.ServingEndpoint(c, "null-webhook-tls")
	if err != nil {
		return nil, err
	}
	srv := crwebhook.NewServer(crwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: certDir, CertName: "tls.crt", KeyName: "tls.key"})
	null := &admission.Webhook{Handler: loadgen.NullHandler}
	for _, path := range []string{webhook.MutateDaemonSetPath, webhook.ValidateDaemonSetPath, webhook.MutatePodPath} {
		srv.Register(path, null)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(runCtx) }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	opts := webhook.ConfigurationOptions{Name: nullConfiguration, URL: "https://" + addr, CABundle: caBundle, Namespace: harness.WebhookNamespace}
	unregister := func() error {
		defer cancel()
		if err := webhookreg.Unregister(ctx, client, nullConfiguration); err != nil {
			return err
		}
		return webhookreg.WaitCalled(ctx, client, opts, false)
	}
	if err := webhookreg.WaitTLS(ctx, addr, pool, done); err != nil {
		cancel()
		return nil, fmt.Errorf("start the null webhook: %w", err)
	}
	if err := webhookreg.Register(ctx, client, opts); err != nil {
		cancel()
		return nil, fmt.Errorf("register the null webhook: %w", err)
	}
	if err := webhookreg.WaitCalled(ctx, client, opts, true); err != nil {
		return nil, errors.Join(err, unregister())
	}
	return unregister, nil
}
