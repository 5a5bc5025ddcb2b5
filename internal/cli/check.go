package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/daemonguard/daemonguard/internal/manifest"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// errDenied makes the process exit non-zero without printing an error line on top of the report.
var errDenied = errors.New("denied")

type checkReport struct {
	Source     string             `json:"source"`
	Kind       string             `json:"kind"`
	Namespace  string             `json:"namespace"`
	Name       string             `json:"name"`
	Allowed    bool               `json:"allowed"`
	Mutated    bool               `json:"mutated"`
	Violations []policy.Violation `json:"violations"`
	Error      string             `json:"error,omitempty"`
}

func newCheckCommand() *cobra.Command {
	var files, policyDirs []string
	var output string
	cmd := &cobra.Command{
		Use:   "check -f FILE|DIR|- [-f ...]",
		Short: "Evaluate manifests offline with the admission policies; exit 1 on a denial",
		Long: `check evaluates every DaemonSet in the given manifests exactly as the admission webhooks
would (injection first, then validation of the injected object) and prints each violation with
file, object and field. Other kinds are skipped. It exits 1 when any DaemonSet would be denied
or cannot be evaluated; warnings alone exit 0. Injection applies, as in the cluster, only in
namespaces labelled daemonguard.io/node-agents: "true": check knows the labels of the Namespace
objects among the manifests, and takes any other namespace as unmarked.

  helm template my-release ./chart | daemonguard check -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q is not one of text, json", output)
			}
			set, docs, err := loadManifests(cmd, files, policyDirs)
			if err != nil {
				return err
			}
			namespaces := manifest.NamespaceLabels(docs)
			var reports []checkReport
			denied := false
			for _, d := range docs {
				if !manifest.IsDaemonSet(d) {
					continue
				}
				r := simulate(cmd.Context(), set, d, namespaces)
				err := simulationError(r)
				rep := checkReport{Source: d.Source, Kind: d.Kind, Namespace: d.Namespace, Name: d.Name,
					Allowed: err == nil && (r.Skip != "" || r.Verdict.Allowed), Mutated: len(r.Patch) > 0, Violations: r.Violations}
				if rep.Violations == nil {
					rep.Violations = []policy.Violation{}
				}
				if err != nil {
					rep.Error = err.Error()
				}
				denied = denied || !rep.Allowed
				reports = append(reports, rep)
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if reports == nil {
					reports = []checkReport{}
				}
				if err := enc.Encode(reports); err != nil {
					return err
				}
			} else {
				printCheck(cmd.OutOrStdout(), reports)
			}
			if denied {
				return errDenied
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - for stdin (repeatable)")
	cmd.Flags().StringArrayVar(&policyDirs, "policies", nil, "directory of extra or replacement .rego files and parameters.yaml (repeatable)")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func printCheck(w io.Writer, reports []checkReport) {
	var deny, warn int
	for _, r := range reports {
		ref := fmt.Sprintf("%s %s %s", r.Source, r.Kind, name(r.Namespace, r.Name))
		if r.Error != "" {
			fmt.Fprintf(w, "ERROR %s: %s\n", ref, r.Error)
			deny++
			continue
		}
		for _, v := range r.Violations {
			fmt.Fprintf(w, "%-6s %s: %s\n", v.Action.Label(), ref, v)
			switch v.Action {
			case policy.Deny:
				deny++
			case policy.Warn:
				warn++
			}
		}
	}
	fmt.Fprintf(w, "%d DaemonSets checked: %d denials, %d warnings\n", len(reports), deny, warn)
}

func name(ns, n string) string {
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + n
}

// loadManifests compiles the policy set (built-ins plus --policies) and reads the -f manifests:
// the common start of check and mutate.
func loadManifests(cmd *cobra.Command, files, policyDirs []string) (*policy.Set, []manifest.Document, error) {
	if len(files) == 0 {
		return nil, nil, fmt.Errorf("-f is required (a file, a directory or - for stdin)")
	}
	set, err := policy.CompileDirs(cmd.Context(), policyDirs)
	if err != nil {
		return nil, nil, err
	}
	docs, err := manifest.Read(files, cmd.InOrStdin())
	if err != nil {
		return nil, nil, err
	}
	return set, docs, nil
}
