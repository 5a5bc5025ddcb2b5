package rolloutcli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/daemonguard/daemonguard/internal/exitcode"
	"github.com/daemonguard/daemonguard/internal/manifest"
	"github.com/daemonguard/daemonguard/internal/preflight"
)

// NewPlanCommand is `daemonguard rollout plan`: the flags, the manifests read, the cluster
// reached through connect (the client and the default namespace of the kubeconfig), then
// internal/preflight plans and renders, and the exit status says the most serious outcome.
func NewPlanCommand(connect func() (kubernetes.Interface, string, error)) *cobra.Command {
	var files []string
	var output, policyNamespace string
	cmd := &cobra.Command{
		Use:   "plan -f FILE|DIR|- [-f ...]",
		Short: "Show what applying DaemonSet manifests would do, node by node, before they are applied",
		Long: `plan reads the target cluster (it never writes) and tells, for every DaemonSet in the manifests:

  - admission as the cluster runs it: the object after daemonguard's injection (webhook or
    in-process policy), the warnings or the denial, a diff against the live object, and whether
    the pod template changes at all (no new revision: no pod is touched);
  - every node: its pod today, and whether it gains, loses, replaces or keeps it, and why; where the
    new pod will not fit or collides on a host port, and which lower-priority pods it preempts;
  - the rollout: daemonguard's waves and pauses for managed DaemonSets, the built-in strategy's
    otherwise, with an estimate from how long this DaemonSet's pods took to become ready.

The manifest is merged into the live DaemonSet as kubectl apply does (three-way, with the
last-applied annotation). Exit status: 0 fine, 2 some DaemonSet would be denied, 3 some new pod would
not fit or would preempt other pods, 1 the plan could not be made.

  helm template my-release ./chart | daemonguard rollout plan -f - -o markdown`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" && output != "markdown" {
				return fmt.Errorf("--output %q is not one of table, json, markdown", output)
			}
			if err := manifest.RequirePaths(files); err != nil {
				return err
			}
			docs, err := manifest.Read(files, cmd.InOrStdin())
			if err != nil {
				return err
			}
			client, ns, err := connect()
			if err != nil {
				return err
			}
			reports, err := preflight.PlanManifests(cmd.Context(), client, ns, policyNamespace, docs, time.Now())
			if err != nil {
				return err
			}
			if err := preflight.Render(cmd.OutOrStdout(), output, reports); err != nil {
				return err
			}
			if code := preflight.ExitStatus(reports); code != 0 {
				return exitcode.Error{Code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - for stdin (repeatable); kinds other than DaemonSet are skipped")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or markdown")
	cmd.Flags().StringVar(&policyNamespace, "daemonguard-namespace", "", "namespace of daemonguard's policy ConfigMaps (default: the namespace of the service its validating webhook calls)")
	return cmd
}
