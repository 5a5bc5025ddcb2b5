package cli

import (
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/selftls"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/webhook"
)

func newWebhookCommand() *cobra.Command {
	opts := webhookserver.Options{}
	var kubeconfig, failureMode, tlsMode, heapLimit string
	var maxWaiting int
	var tlsOpts selftls.Options
	var tlsIPs []net.IP
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Serve the mutating and validating admission webhooks",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch admission.FailureMode(failureMode) {
			case admission.FailClosed, admission.FailOpenWithWarning:
				opts.FailureMode = admission.FailureMode(failureMode)
			default:
				return fmt.Errorf("--failure-mode %q is not one of deny, warn", failureMode)
			}
			if opts.PolicyLoadTimeout <= 0 {
				return fmt.Errorf("--policy-load-timeout %s must be positive: a policy set load without a deadline could hold a replica's CPU for ever", opts.PolicyLoadTimeout)
			}
			if err := evaluationBounds(&opts.EvaluationBounds, maxWaiting, heapLimit); err != nil {
				return err
			}
			if opts.ShutdownDelay < 0 {
				return fmt.Errorf("--shutdown-delay %s must not be negative", opts.ShutdownDelay)
			}
			if opts.Namespace == "" {
				return fmt.Errorf("--namespace is required: it is exempt from admission and holds the policy ConfigMaps")
			}
			switch tlsMode {
			case tlsModeFiles:
			case tlsModeSelfManaged:
				tlsOpts.Config.IPAddresses = tlsIPs
				opts.SelfManagedTLS = &tlsOpts
			default:
				return fmt.Errorf("--tls-mode %q is not one of %s, %s", tlsMode, tlsModeFiles, tlsModeSelfManaged)
			}
			cfg, err := componentRESTConfig(kubeconfig)
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
	f.StringVar(&opts.InProcessInjectionPolicy, "in-process-injection-policy", "", "name of the MutatingAdmissionPolicy that injects instead of the DaemonSet mutating webhook (see `daemonguard policy export`); the webhook reports in /policy-status whether it follows the policy set")
	f.StringVar(&opts.Host, "host", "", "address to serve webhooks on (default all)")
	f.IntVar(&opts.Port, "port", 9443, "port to serve webhooks on")
	f.StringVar(&opts.CertDir, "cert-dir", "/tls", "folder with tls.crt and tls.key; reloaded on change")
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "metrics address: /metrics and /policy-status over HTTPS with the certificate of --cert-dir, for a bearer token allowed get on the path; 0 disables")
	f.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", "health probe address (/healthz, /readyz); 0 disables")
	addServingFlags(f, &opts.Serving)
	f.DurationVar(&opts.AuditInterval, "audit-interval", 5*time.Minute, "how often stored DaemonSets are audited (Events, metrics); 0 disables")
	f.BoolVar(&opts.OpenReports, "open-reports", false, "the audit also writes OpenReports Reports (openreports.io/v1alpha1) per namespace; needs the CRD and RBAC on reports.openreports.io")
	f.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect one replica to run the audit (admission is served by every replica)")
	f.DurationVar(&opts.PolicyLoadTimeout, "policy-load-timeout", policy.DefaultLimits.Timeout, "deadline of each policy set load (compile, enforcement rules, trial evaluation); a set that exceeds it is rejected and the last good set keeps serving")
	f.DurationVar(&opts.EvaluationBounds.Timeout, "evaluation-timeout", webhook.DefaultBounds.Timeout, "the server's deadline for each admission evaluation, whatever the review's timeout asks (a shorter one still shortens it); keep it below the webhook configurations' timeoutSeconds, so that --failure-mode answers before the API server's failurePolicy does")
	f.IntVar(&opts.EvaluationBounds.MaxConcurrent, "max-concurrent-evaluations", webhook.DefaultBounds.MaxConcurrent, "how many DaemonSet reviews are evaluated at once; a review beyond it waits (--max-waiting-evaluations)")
	f.IntVar(&maxWaiting, "max-waiting-evaluations", webhook.DefaultBounds.MaxWaiting, "how many DaemonSet reviews may wait, first come first, for one of --max-concurrent-evaluations to end, each at most a quarter of --evaluation-timeout; a review beyond it, or one that waited that long, is answered by --failure-mode; 0: none waits")
	f.StringVar(&heapLimit, "evaluation-heap-limit", resource.NewQuantity(int64(webhook.DefaultBounds.HeapLimit), resource.BinarySI).String(), "heap size past which the DaemonSet reviews in flight are cancelled and new ones refused, each answered by --failure-mode, until the heap is back under it; about three quarters of the container's memory limit")
	f.DurationVar(&opts.ShutdownDelay, "shutdown-delay", 0, "on SIGTERM, go on answering reviews this long, not ready and closing each connection after its answer, before stopping: the API server then sends its next reviews to another replica instead of on a connection this one closes")
	f.StringVar(&failureMode, "failure-mode", string(admission.FailClosed), "when policies cannot be evaluated: deny (reject the request) or warn (admit with a warning); never silent")
	f.StringVar(&tlsMode, "tls-mode", tlsModeFiles, `"files": serve tls.crt/tls.key from --cert-dir (a mounted Secret, e.g. from cert-manager); "self-managed": keep a CA and serving certificate in --tls-secret, write the CA bundle into --webhook-configuration and rotate both`)
	f.StringVar(&tlsOpts.SecretName, "tls-secret", "", "self-managed: Secret in --namespace holding the CA and the serving certificate")
	f.StringVar(&tlsOpts.WebhookConfigurationName, "webhook-configuration", "", "self-managed: name of the Mutating- and ValidatingWebhookConfiguration to write the CA bundle into")
	f.StringVar(&tlsOpts.CAConfigMapName, "tls-ca-configmap", "", "self-managed: ConfigMap in --namespace that receives the CA bundle alone (ca.crt), for scrapers that verify the serving certificate without reading the Secret and its keys")
	f.StringSliceVar(&tlsOpts.Config.DNSNames, "tls-dns-name", nil, "self-managed: DNS name the serving certificate covers (repeatable), e.g. the webhook Service's names")
	f.IPSliceVar(&tlsIPs, "tls-ip-address", nil, "self-managed: IP address the serving certificate covers (repeatable)")
	f.DurationVar(&tlsOpts.Config.CAValidity, "tls-ca-validity", selftls.DefaultCAValidity, "self-managed: lifetime of a new CA; renewed two thirds through")
	f.DurationVar(&tlsOpts.Config.CertValidity, "tls-cert-validity", selftls.DefaultCertValidity, "self-managed: lifetime of a new serving certificate; renewed two thirds through")
	f.DurationVar(&tlsOpts.Config.PropagationGrace, "tls-propagation-grace", selftls.DefaultPropagationGrace, "self-managed: how long a new CA is published before certificates from it are served, and how long a new certificate is served before the old CA is dropped")
	return cmd
}

// evaluationBounds checks the bounds the flags set and reads the waiting reviews and the heap
// limit into b.
func evaluationBounds(b *webhook.Bounds, maxWaiting int, heapLimit string) error {
	if b.Timeout <= 0 {
		return fmt.Errorf("--evaluation-timeout %s must be positive: an evaluation without a deadline could hold a replica's CPU for ever", b.Timeout)
	}
	if b.MaxConcurrent <= 0 {
		return fmt.Errorf("--max-concurrent-evaluations %d must be positive", b.MaxConcurrent)
	}
	switch {
	case maxWaiting < 0:
		return fmt.Errorf("--max-waiting-evaluations %d must not be negative", maxWaiting)
	case maxWaiting == 0:
		b.MaxWaiting = -1 // webhook.Bounds' "none waits"; its zero is the default
	default:
		b.MaxWaiting = maxWaiting
	}
	q, err := resource.ParseQuantity(heapLimit)
	if err != nil {
		return fmt.Errorf("--evaluation-heap-limit %q: %w", heapLimit, err)
	}
	if q.Sign() <= 0 {
		return fmt.Errorf("--evaluation-heap-limit %s must be positive", heapLimit)
	}
	b.HeapLimit = uint64(q.Value())
	return nil
}

const (
	tlsModeFiles       = "files"
	tlsModeSelfManaged = "self-managed"
)

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

// componentRESTConfig is restConfig for the webhook and the rollout controller, which run beside
// the API server, without response compression, as kube-controller-manager and kube-scheduler
// run: gzip costs both ends CPU on every watch event and list (5% of the controller's CPU in a
// 1,000-node rollout, and the API server's share to compress it) to save bandwidth a cluster's
// network does not lack. The CLI's commands, run from afar, keep it.
func componentRESTConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.DisableCompression = true
	return cfg, nil
}
