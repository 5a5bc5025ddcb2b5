package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// checkOptions are the flags of check.
type checkOptions struct {
	output string // text or json
	manifestFlags
}

func newCheckCommand() *cobra.Command {
	o := &checkOptions{}
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
			return o.run(cmd)
		},
	}
	o.manifestFlags.add(cmd.Flags())
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "text or json")
	return cmd
}

func (o *checkOptions) run(cmd *cobra.Command) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q is not one of text, json", o.output)
	}
	set, docs, err := o.load(cmd)
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
		err := r.Err()
		rep := checkReport{Source: d.Source, Kind: d.Kind, Namespace: d.Namespace, Name: d.Name,
			Allowed: r.Skip != "" || r.Verdict.Allowed, Mutated: len(r.Patch) > 0, Violations: r.Violations}
		if rep.Violations == nil {
			rep.Violations = []policy.Violation{}
		}
		if err != nil {
			rep.Error = err.Error()
		}
		denied = denied || !rep.Allowed
		reports = append(reports, rep)
	}
	if o.output == "json" {
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

// manifestFlags are the -f and --policies flags of the offline commands, check and mutate.
type manifestFlags struct {
	files, policyDirs []string
}

func (m *manifestFlags) add(f *pflag.FlagSet) {
	f.StringArrayVarP(&m.files, "filename", "f", nil, "manifest file, directory or - for stdin (repeatable)")
	addPoliciesFlag(f, &m.policyDirs)
}

// load compiles the policy set (built-ins plus --policies) and reads the -f manifests: the common
// start of check and mutate.
func (m *manifestFlags) load(cmd *cobra.Command) (*policy.Set, []manifest.Document, error) {
	if err := manifest.RequirePaths(m.files); err != nil {
		return nil, nil, err
	}
	set, err := policy.CompileDirs(cmd.Context(), m.policyDirs)
	if err != nil {
		return nil, nil, err
	}
	docs, err := manifest.Read(m.files, cmd.InOrStdin())
	if err != nil {
		return nil, nil, err
	}
	return set, docs, nil
}
