// Package cli defines the daemonguard command tree. Each subcommand is a thin layer over a package
// that does the work, so the same logic serves the binary, the kubectl plugin and the tests.
//
// cli.go is the root (New), version and the exit status main returns (IsReported, ExitCode);
// webhook.go and controller.go run the components; check.go, mutate.go and audit.go evaluate
// manifests or a cluster against the policies, with manifests.go's offline admission of one
// manifest document; policytest.go and policyexport.go are `policy test` and `policy export`.
// `rollout` and every verb of it are internal/rolloutcli's (rolloutcli.NewCommand).
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/daemonguard/daemonguard/internal/exitcode"
	"github.com/daemonguard/daemonguard/internal/rolloutcli"
	"github.com/daemonguard/daemonguard/internal/serving"
)

// Version is stamped at build time with -ldflags "-X github.com/daemonguard/daemonguard/internal/cli.Version=...".
var Version = ""

// New returns the root command.
func New() *cobra.Command {
	root := &cobra.Command{
		Use:           "daemonguard",
		Short:         "Admission policy and progressive rollouts for Kubernetes DaemonSets",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand(), newWebhookCommand(), newCheckCommand(), newAuditCommand(), newMutateCommand(), newPolicyCommand(), newControllerCommand(), rolloutcli.NewCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the daemonguard version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "daemonguard", version())
			return err
		},
	}
}

func version() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}

// Main runs root, a daemonguard command tree, until it returns or SIGINT or SIGTERM cancels its
// context, and exits as its error says: the whole of each daemonguard binary's main.
func Main(root *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		if !IsReported(err) {
			fmt.Fprintln(os.Stderr, "error:", err)
		}
		os.Exit(ExitCode(err))
	}
}

// IsReported tells errors whose story the command already printed (a denial report), so main
// exits non-zero without an extra error line.
func IsReported(err error) bool {
	return errors.Is(err, errDenied) || errors.As(err, new(exitcode.Error))
}

// ExitCode is the process exit code for err returned by the root command: 0 for nil, the
// exitcode.Error's code, else 1.
func ExitCode(err error) int {
	var e exitcode.Error
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e.Code
	}
	return 1
}

// addServingFlags registers the flags of internal/serving's options, which both components share.
// addPoliciesFlag adds --policies to a command that compiles the policy set.
func addPoliciesFlag(f *pflag.FlagSet, dirs *[]string) {
	f.StringArrayVar(dirs, "policies", nil, "directory of extra or replacement .rego files and parameters.yaml (repeatable)")
}

func addServingFlags(f *pflag.FlagSet, o *serving.Options) {
	f.BoolVar(&o.EnableHTTP2, "enable-http2", false, "offer HTTP/2 besides HTTP/1.1 on the HTTPS servers (webhook, metrics); off by default for HTTP/2 rapid reset (CVE-2023-44487)")
}
