package apibench

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/loadgen"
	"github.com/daemonguard/daemonguard/test/localcluster"
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
	go func() { _ = srv.Start(runCtx) }()
	mutating, validating := webhook.Configurations(webhook.ConfigurationOptions{
		Name: nullConfiguration, URL: fmt.Sprintf("https://127.0.0.1:%d", port), CABundle: caBundle, Namespace: harness.WebhookNamespace,
	})
	adm := client.AdmissionregistrationV1()
	unregister := func() error {
		_ = adm.MutatingWebhookConfigurations().Delete(ctx, nullConfiguration, metav1.DeleteOptions{})
		_ = adm.ValidatingWebhookConfigurations().Delete(ctx, nullConfiguration, metav1.DeleteOptions{})
		err := waitCalled(ctx, client, false)
		cancel()
		return err
	}
	if _, err := adm.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		cancel()
		return nil, fmt.Errorf("register the null webhook: %w", err)
	}
	if _, err := adm.ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		_ = unregister()
		return nil, fmt.Errorf("register the null webhook: %w", err)
	}
	if err := waitCalled(ctx, client, true); err != nil {
		_ = unregister()
		return nil, err
	}
	return unregister, nil
}

// waitCalled waits until a server-side dry-run create makes the API server call the DaemonSet
// mutating webhook (called is true), or no longer call it (false), as its metrics count.
func waitCalled(ctx context.Context, client kubernetes.Interface, called bool) error {
	name := "daemonsets.mutate.daemonguard.io"
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		before, err := scrape(ctx, client)
		if err != nil {
			return false, err
		}
		if _, err := client.AppsV1().DaemonSets(metav1.NamespaceDefault).Create(ctx, agent("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			return false, nil
		}
		after, err := scrape(ctx, client)
		if err != nil {
			return false, err
		}
		key := webhookKey{webhook: name, operation: "CREATE"}
		return (after[key].count > before[key].count) == called, nil
	})
	if err != nil {
		return fmt.Errorf("wait until the API server calls the webhook (%v): %w", called, err)
	}
	return nil
}
