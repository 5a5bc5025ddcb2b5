package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daemonguard/daemonguard/controller/rollout"
	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/selftls"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/webhookreg"
	"github.com/daemonguard/daemonguard/webhook"
)

// runName names what `run` creates in the cluster: the two webhook configurations and the TLS
// Secret. It differs from the chart's names, so a run never takes over an installed release.
const runName = "daemonguard-run"

// metricsReader is the ServiceAccount whose tokens may read the metrics servers of a run.
const metricsReader = runName + "-metrics-reader"

func newRunCommand() *cobra.Command {
	var (
		kubeconfig, namespace string
		port                  int
		withWebhook           bool
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run daemonguard's webhook and rollout controller from this checkout against $KUBECONFIG until Ctrl-C",
		Long: `run starts daemonguard's admission webhook and rollout controller in this process, as
'daemonguard webhook' and 'daemonguard controller' run in a cluster, against the cluster of the
current kubeconfig (e.g. 'make cluster'), logging to the terminal.

The webhook serves https://127.0.0.1:PORT with self-managed TLS (CA and serving certificate in the
Secret NAMESPACE/daemonguard-run-tls) and is registered as the MutatingWebhookConfiguration and
ValidatingWebhookConfiguration "daemonguard-run" in URL mode, so the API server must reach this
machine's loopback: true for a local control plane. Ctrl-C takes both configurations out again.
With --webhook=false only the rollout controller runs, against any cluster.

The metrics servers (webhook https://127.0.0.1:8080, controller https://127.0.0.1:8090) answer
only a bearer token allowed get on their paths: run creates the ServiceAccount
NAMESPACE/daemonguard-run-metrics-reader with that permission and prints a curl command with a
token of it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rules := clientcmd.NewDefaultClientConfigLoadingRules()
			rules.ExplicitPath = kubeconfig
			cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
			if err != nil {
				return fmt.Errorf("load kubeconfig: %w", err)
			}
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			log := zap.New(zap.UseDevMode(true), zap.WriteTo(cmd.ErrOrStderr()))
			ctrl.SetLogger(log)
			ctx := cmd.Context()
			if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create namespace %s: %w", namespace, err)
			}
			if err := harness.GrantGet(ctx, client, namespace, metricsReader, harness.MetricsPaths...); err != nil {
				return err
			}
			scrape := fmt.Sprintf(`curl -k -H "Authorization: Bearer $(kubectl -n %s create token %s)" https://127.0.0.1:`, namespace, metricsReader)

			runCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			errs := make(chan error, 2)
			running := 0
			if withWebhook {
				certDir, err := os.MkdirTemp("", "daemonguard-run-tls-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(certDir)
				url := "https://127.0.0.1:" + strconv.Itoa(port)
				defer func() {
					// The DaemonSet webhooks fail closed: a configuration left behind would reject
					// every DaemonSet write once this process is gone.
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					if err := webhookreg.Unregister(ctx, client, runName); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "error: %v; delete them with: kubectl delete mutatingwebhookconfiguration,validatingwebhookconfiguration %s\n", err, runName)
						return
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "Removed the webhook configurations %q.\n", runName)
				}()
				// Registered after the cleanup is deferred: a failure halfway leaves nothing behind.
				// Any configurations left by a killed run are replaced; the webhook's self-managed
				// TLS fills in the CA bundle.
				if err := webhookreg.Register(ctx, client, webhook.ConfigurationOptions{Name: runName, URL: url, Namespace: namespace}); err != nil {
					return err
				}
				running++
				go func() {
					errs <- webhookserver.Run(runCtx, webhookserver.Options{
						RESTConfig: cfg, Namespace: namespace, Host: "127.0.0.1", Port: port, CertDir: certDir,
						MetricsAddr: "127.0.0.1:8080", HealthAddr: "0", FailureMode: admission.FailClosed,
						AuditInterval: time.Minute, LeaderElection: true, Log: log.WithName("webhook"),
						SelfManagedTLS: &selftls.Options{
							Namespace: namespace, SecretName: runName + "-tls", WebhookConfigurationName: runName, CertDir: certDir,
							// One replica and a local API server: the CA bundle is seen at once.
							Config: selftls.Config{IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, PropagationGrace: 5 * time.Second},
						},
					})
				}()
				fmt.Fprintf(cmd.ErrOrStderr(), "Webhook at %s, registered as %q. Policy status and metrics:\n  %s8080%s\n", url, runName, scrape, webhookserver.PolicyStatusPath)
			}
			running++
			go func() {
				errs <- rollout.Run(runCtx, rollout.Options{
					RESTConfig: cfg, MetricsAddr: "127.0.0.1:8090", HealthAddr: "0",
					LeaderElection: true, LeaderElectionNamespace: namespace, Log: log.WithName("controller"),
				})
			}()
			fmt.Fprintf(cmd.ErrOrStderr(), "Rollout controller running. Metrics:\n  %s8090%s\nPress Ctrl-C to stop.\n", scrape, serving.MetricsPath)

			// The first component to stop, by Ctrl-C or by an error, stops the other.
			var first error
			for range running {
				err := <-errs
				cancel()
				if first == nil && err != nil && !errors.Is(err, context.Canceled) {
					first = err
				}
			}
			return first
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&namespace, "namespace", "daemonguard-system", "daemonguard's own namespace: exempt from admission, home of the policy ConfigMaps, the TLS Secret and the leader Leases")
	f.IntVar(&port, "port", 9443, "loopback port the webhook serves on")
	f.BoolVar(&withWebhook, "webhook", true, "run and register the webhook (needs an API server that reaches 127.0.0.1)")
	return cmd
}
