package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/manifest"
)

// mutateOptions are the flags of mutate.
type mutateOptions struct {
	manifestFlags
	diff bool
}

func newMutateCommand() *cobra.Command {
	o := &mutateOptions{}
	cmd := &cobra.Command{
		Use:   "mutate -f FILE|DIR|- [--diff]",
		Short: "Print manifests as admission would store them (DaemonSets injected, the rest unchanged)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	o.manifestFlags.add(cmd.Flags())
	cmd.Flags().BoolVar(&o.diff, "diff", false, "print only a unified diff of what admission changes")
	return cmd
}

func (o *mutateOptions) run(cmd *cobra.Command) error {
	set, docs, err := o.load(cmd)
	if err != nil {
		return err
	}
	namespaces := manifest.NamespaceLabels(docs)
	out := cmd.OutOrStdout()
	for i, d := range docs {
		mutated := d.Raw
		if manifest.IsDaemonSet(d) {
			r := simulate(cmd.Context(), set, d, namespaces)
			if err := r.Err(); err != nil {
				return fmt.Errorf("%s: %w", d.Ref(), err)
			}
			if r.Skip == "" {
				mutated = r.Mutated
			}
		}
		if o.diff {
			if err := printDiff(out, d, mutated); err != nil {
				return err
			}
			continue
		}
		y, err := yaml.JSONToYAML(mutated)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(out, "---")
		}
		if _, err := out.Write(y); err != nil {
			return err
		}
	}
	return nil
}

func printDiff(w io.Writer, d manifest.Document, mutated []byte) error {
	before, err := yaml.JSONToYAML(d.Raw)
	if err != nil {
		return err
	}
	after, err := yaml.JSONToYAML(mutated)
	if err != nil {
		return err
	}
	if string(before) == string(after) {
		return nil
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(before)), B: difflib.SplitLines(string(after)),
		FromFile: d.Ref(), ToFile: d.Ref() + " (as admitted)", Context: 3,
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, strings.TrimRight(text, "\n")+"\n")
	return err
}
