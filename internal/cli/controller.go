package cli

import (
	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/daemonguard/daemonguard/controller/rollout"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
)

func newControllerCommand() *cobra.Command {
	opts := rollout.Options{}
	var kubeconfig, watchNamespace string
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the rollout controller for DaemonSets annotated daemonguard.io/rollout: managed",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := componentRESTConfig(kubeconfig)
			if err != nil {
				return err
			}
			if watchNamespace != "" {
				opts.Namespaces = append(opts.Namespaces, watchNamespace)
			}
			opts.RESTConfig = cfg
			opts.Log = zap.New()
			ctrl.SetLogger(opts.Log)
			return rollout.Run(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (default: in-cluster config, then $KUBECONFIG)")
	f.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "metrics address: /metrics over HTTPS (self-signed certificate), for a bearer token allowed get on it; 0 disables")
	f.StringVar(&opts.HealthAddr, "health-probe-bind-address", ":8081", "health probe address (/healthz, /readyz); 0 disables")
	addServingFlags(f, &opts.Serving)
	f.BoolVar(&opts.LeaderElection, "leader-elect", true, "elect one active replica (a standby takes over mid-rollout from cluster state)")
	f.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader Lease (default: the pod's namespace)")
	f.StringSliceVar(&opts.Namespaces, "namespaces", nil, "only roll out DaemonSets of these namespaces, comma-separated; the controller then watches and needs permissions in them only (default: all)")
	// The single-namespace flag of earlier releases: one more entry of --namespaces.
	f.StringVar(&watchNamespace, "watch-namespace", "", "only roll DaemonSets of this namespace")
	_ = f.MarkDeprecated("watch-namespace", "use --namespaces")
	f.StringVar(&opts.PprofAddr, "pprof-bind-address", "0", "net/http/pprof address for profiling (e.g. localhost:6060); 0 disables")
	f.StringVar(&opts.Prometheus.Address, "prometheus-address", "", "base URL of the Prometheus that measures analysis gates (daemonguard.io/analysis), e.g. https://prometheus.monitoring:9090; without it a rollout with gates waits")
	f.StringVar(&opts.Prometheus.CAFile, "prometheus-ca-file", "", "CA certificate file that verifies Prometheus' serving certificate (default: the system's roots); re-read when it changes")
	f.StringVar(&opts.Prometheus.BearerTokenFile, "prometheus-bearer-token-file", "", "file of the bearer token sent to Prometheus; read on every query, so a rotated token needs no restart")
	f.DurationVar(&opts.Prometheus.Timeout, "prometheus-timeout", promquery.DefaultTimeout, "deadline of each analysis query; a query without an answer by then makes the measurement inconclusive")
	f.IntVar(&opts.Prometheus.MaxInFlight, "prometheus-max-in-flight", promquery.DefaultMaxInFlight, "most analysis queries at Prometheus at once, over every DaemonSet; the others wait their turn")
	f.StringVar(&opts.Prometheus.NamespaceLabel, "prometheus-namespace-label", rolloutanalysis.DefaultNamespaceLabel, "series label naming the namespace: outside namespaces marked for node agents (daemonguard.io/node-agents=true) a gate's query reads only series with this label set to its DaemonSet's namespace")
	return cmd
}
