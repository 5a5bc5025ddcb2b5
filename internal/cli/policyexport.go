package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/inprocess"
	"github.com/daemonguard/daemonguard/internal/policy"
)

func newPolicyExportCommand() *cobra.Command {
	var (
		policyDirs []string
		o          inprocess.Options
	)
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print the MutatingAdmissionPolicy and binding that inject in-process (Kubernetes 1.36+)",
		Long: `export prints, as YAML for a GitOps repository, the MutatingAdmissionPolicy
(admissionregistration.k8s.io/v1) and its binding with which the API server itself injects what
daemonguard's mutating webhook injects into DaemonSet pod templates, generated from the inject
policy's parameters (the built-ins merged with --policies directories' parameters.yaml). Register
it instead of the DaemonSet mutating webhook (the chart does with webhook.inProcessInjection);
validation stays with the webhook.

It refuses when a --policies directory replaces or extends the inject policy or its library in
Rego: the API server cannot evaluate Rego, so injection must stay in the webhook then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			modules, params, err := policy.FromDirs(policyDirs)
			if err != nil {
				return err
			}
			objs, err := inprocess.Generate(cmd.Context(), modules, params, o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for i, obj := range []any{objs.Policy, objs.Binding} {
				raw, err := yaml.Marshal(obj)
				if err != nil {
					return err
				}
				if i > 0 {
					fmt.Fprintln(out, "---")
				}
				fmt.Fprint(out, string(raw))
			}
			return nil
		},
	}
	addPoliciesFlag(cmd.Flags(), &policyDirs)
	cmd.Flags().StringVar(&o.Name, "name", "daemonguard-inject", "name of the policy and of its binding")
	cmd.Flags().StringVar(&o.Namespace, "namespace", "daemonguard", "daemonguard's namespace (exempt, like kube-system)")
	cmd.Flags().StringArrayVar(&o.ExemptNamespaces, "exempt-namespace", nil, "further namespace to leave alone (repeatable), as the webhook's --exempt-namespace")
	return cmd
}
