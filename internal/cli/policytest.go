package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/daemonguard/daemonguard/internal/policy"
)

func newPolicyCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Work with Rego policies"}
	var verbose bool
	test := &cobra.Command{
		Use:   "test [DIR]",
		Short: "Run the Rego tests (*_test.rego) in DIR against the built-in policies and parameters; no DIR runs the built-in suite",
		Long: `test runs every test_* rule the way 'go test' runs the built-in suite: OPA's test runner, Rego v1,
strict built-in errors, with data.daemonguard.parameters set to the built-in parameters merged with
DIR's parameters.yaml. Modules in DIR whose package equals a built-in's replace it, exactly as in
the webhook. It fails on a failing test and on a directory without tests.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			modules, tests, params, err := policy.BuiltinWithTests()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if modules, tests, params, err = userSuite(args[0], modules, params); err != nil {
					return err
				}
			}
			results, err := policy.RunRegoTests(cmd.Context(), modules, tests, params)
			if err != nil {
				return err
			}
			failed := 0
			out := cmd.OutOrStdout()
			for _, r := range results {
				if !r.Passed {
					failed++
					fmt.Fprintf(out, "FAIL %s (%s): %s\n", r.Name, r.Location, r.Detail)
				} else if verbose {
					fmt.Fprintf(out, "PASS %s\n", r.Name)
				}
			}
			fmt.Fprintf(out, "%d passed, %d failed\n", len(results)-failed, failed)
			if failed > 0 {
				return errDenied
			}
			return nil
		},
	}
	test.Flags().BoolVarP(&verbose, "verbose", "v", false, "list passing tests too")
	cmd.AddCommand(test, newPolicyExportCommand())
	return cmd
}

// userSuite overlays DIR's modules on the built-ins and returns DIR's tests only.
func userSuite(dir string, builtin []policy.Module, params map[string]any) ([]policy.Module, []policy.Module, map[string]any, error) {
	src := policy.Source{Name: dir, Files: map[string]string{}}
	var tests []policy.Module
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case strings.HasSuffix(path, "_test.rego"):
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tests = append(tests, policy.Module{Name: filepath.Join(dir, rel), Source: string(data)})
		case strings.HasSuffix(path, ".rego"), filepath.Base(path) == "parameters.yaml":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src.Files[rel] = string(data)
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read %s: %w", dir, err)
	}
	modules, params, err := policy.Overlay(builtin, params, []policy.Source{src})
	return modules, tests, params, err
}
