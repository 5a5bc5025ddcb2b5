package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/audit"
	"github.com/daemonguard/daemonguard/internal/policy"
)

func newAuditCommand() *cobra.Command {
	var kubeconfig, output string
	var policyDirs, exempt []string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Evaluate the DaemonSets stored in the cluster against the policies; exit 1 if any would be denied",
		Long: `audit reads every DaemonSet of the current kubeconfig's cluster (kube-system and --exempt-namespace
excluded) and evaluates it as admission would today, with live namespace labels and node counts.
It reports policy violations and DaemonSets whose template lacks what the inject policy adds
(typically those created before daemonguard was installed).

-o report prints the OpenReports Reports (openreports.io/v1alpha1, YAML) the webhook's periodic
audit would write with --open-reports, without writing them: one per namespace with DaemonSets
(several, daemonguard-1, ... when its results exceed 512 KiB), a result per DaemonSet and policy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" && output != "report" {
				return fmt.Errorf("--output %q is not one of text, json, report", output)
			}
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
			if err != nil {
				return fmt.Errorf("create client: %w", err)
			}
			set, err := policy.CompileDirs(cmd.Context(), policyDirs)
			if err != nil {
				return err
			}
			findings, err := audit.Run(cmd.Context(), c, set, admission.ExemptNamespaces("", exempt))
			if err != nil {
				return err
			}
			switch output {
			case "report":
				if err := printReports(cmd.OutOrStdout(), audit.Reports(findings, audit.PolicyActions(set), time.Now())); err != nil {
					return err
				}
			case "json":
				if findings == nil {
					findings = []audit.Finding{}
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(findings); err != nil {
					return err
				}
			default:
				if err := printAudit(cmd.OutOrStdout(), findings); err != nil {
					return err
				}
			}
			for _, f := range findings {
				if f.Denied() {
					return errDenied
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig path (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	addPoliciesFlag(f, &policyDirs)
	f.StringSliceVar(&exempt, "exempt-namespace", nil, "namespaces to skip besides kube-system (e.g. daemonguard's own)")
	f.StringVarP(&output, "output", "o", "text", "text, json, or report (OpenReports Reports as YAML, not written to the cluster)")
	return cmd
}

// printReports writes reports as a YAML stream that `kubectl apply -f -` accepts.
func printReports(w io.Writer, reports []openreports.Report) error {
	for _, r := range reports {
		raw, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "---\n%s", raw); err != nil {
			return err
		}
	}
	return nil
}

func printAudit(w io.Writer, findings []audit.Finding) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DAEMONSET\tSTATE\tDETAIL")
	var violating, missing int
	for _, f := range findings {
		ref := name(f.Namespace, f.Name)
		switch {
		case f.Error != "":
			fmt.Fprintf(tw, "%s\tERROR\t%s\n", ref, f.Error)
			violating++
			continue
		case len(f.Violations) == 0 && !f.MissingInjection:
			fmt.Fprintf(tw, "%s\tOK\t\n", ref)
		}
		if f.MissingInjection {
			missing++
			fmt.Fprintf(tw, "%s\tNOT INJECTED\ttemplate lacks what the inject policy adds; re-apply the manifest\n", ref)
		}
		if len(f.Violations) > 0 {
			violating++
		}
		for _, v := range f.Violations {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", ref, v.Action.Label(), v)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d DaemonSets audited: %d with violations, %d not injected\n", len(findings), violating, missing)
	return err
}
