package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/webhook"
)

func newWebhookCommand() *cobra.Command {
	opts := webhookserver.Options{}
	var kubeconfig, failureMode string
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Serve the mutating and validating admission webhooks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch webhook.FailureMode(failureMode) {
			case webhook.FailClosed, webhook.FailOpenWithWarning:
				opts.FailureMode = webhook.FailureMode(failureMode)
			default:
				return fmt.Errorf("--failure-mode %q is not one of deny, warn", failureMode)
			}
			if opts.Namespace == "" {
				return fmt.Errorf("--namespace is required: it is exempt from admission and holds the policy ConfigMaps")
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			opts.RESTConfig = cfg
			opts.Log = zap.New(zap.UseDevMode(false))
			ctrl.SetLogger(opts.Log)
			return webhookserver.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster config, then $KUBECONFIG)")
	f.StringVar(&opts.Namespace, "namespace", "", "daemonguard's own namespace (always exempt; policy ConfigMaps live here)")
	f.StringSliceVar(&opts.ExemptNamespaces, "exempt-namespace", nil, "further namespaces the webhooks never act on (kube-system always is)")
	f.StringVar(&opts.Host, "host", "", "address to serve webhooks on (default all)")
	f.IntVar(&opts.Port, "port", 9443, "port to serve webhooks on")
	f.StringVar(&opts.CertDir, "cert-dir", "/tls", "folder with tls.crt and tls.key; reloaded on change")
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "metrics address (serves /metrics and /policy-status); 0 disables")
	f.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", "health probe address (/healthz, /readyz); 0 disables")
	f.DurationVar(&opts.AuditInterval, "audit-interval", 5*time.Minute, "how often stored DaemonSets are audited (Events, metrics); 0 disables")
	f.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect one replica to run the audit (admission is served by every replica)")
	f.StringVar(&failureMode, "failure-mode", string(webhook.FailClosed), "when policies cannot be evaluated: deny (reject the request) or warn (admit with a warning); never silent")
	return cmd
}

// restConfig loads --kubeconfig, else in-cluster config, else $KUBECONFIG / ~/.kube/config.
func restConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	return cfg, nil
}
