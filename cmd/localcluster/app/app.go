// Package app holds the commands of the localcluster developer tool: build the test binaries,
// run a local control plane until interrupted, run the demo, run daemonguard from the checkout
// against the current kubeconfig, measure admission latency through the API server, and clean up
// after a killed demo.
package app

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/apibench"
	"github.com/daemonguard/daemonguard/test/demo"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// New returns the root command.
func New() *cobra.Command {
	root := &cobra.Command{Use: "localcluster", Short: "Build and run daemonguard's embedded local Kubernetes control plane", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newBuildCommand(), newUpCommand(), newDemoCommand(), newDownCommand(), newRunCommand(), newBenchAdmissionCommand())
	return root
}

func newBuildCommand() *cobra.Command {
	var sets []string
	cmd := &cobra.Command{
		Use:   "build [--set NAME]... [BINARY...]",
		Short: "Build (or find cached) the test binaries of the named tool sets and binaries, every tool when none is named (as cmd/testbin, which `make` runs)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := toolbin.Build(cmd.Context(), cmd.ErrOrStderr(), sets, args); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "Test binaries are built.")
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&sets, "set", nil, "tool sets to build: "+strings.Join(toolbin.ToolSetNames, ", "))
	return cmd
}

const realNodeFlagHelp = "run the control-plane node as a real node (kubelet, containerd, runc, CNI, kube-proxy); needs root and Debian's packages (make testdeps)"

// stateDir is where clusters started by this tool live, so `down` finds them after a SIGKILL.
func stateDir() (string, error) {
	root, err := toolbin.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "clusters"), nil
}

func newUpCommand() *cobra.Command {
	var (
		workers  int
		realNode bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start a local control plane (one control-plane node plus workers) and keep it running until Ctrl-C",
		RunE:  func(cmd *cobra.Command, _ []string) error { return up(cmd, workers, realNode) },
	}
	cmd.Flags().IntVar(&workers, "workers", 4, "number of untainted worker nodes")
	cmd.Flags().BoolVar(&realNode, "real-node", false, realNodeFlagHelp)
	return cmd
}

// up starts a cluster of one control-plane node and the workers, prints its KUBECONFIG and keeps
// it running until the command's context ends.
func up(cmd *cobra.Command, workers int, realNode bool) error {
	parent, err := stateDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	nodes := append([]localcluster.Node{localcluster.ControlPlaneNode("control-plane-0")}, localcluster.WorkerNodes("worker", workers)...)
	c, err := localcluster.Start(cmd.Context(), localcluster.Config{Nodes: nodes, ParentDir: parent, Log: cmd.ErrOrStderr(), RealNode: realNode})
	if err != nil {
		return err
	}
	defer c.Stop()
	fmt.Fprintf(cmd.OutOrStdout(), "export KUBECONFIG=%s\n", c.KubeconfigPath)
	fmt.Fprintln(cmd.ErrOrStderr(), "Press Ctrl-C to stop the cluster.")
	<-cmd.Context().Done()
	return nil
}

func newDemoCommand() *cobra.Command {
	var wait, realNode bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a local cluster, apply testdata/demo and show where each DaemonSet runs",
		RunE: func(cmd *cobra.Command, _ []string) error {
			root, err := toolbin.RepoRoot()
			if err != nil {
				return err
			}
			parent, err := stateDir()
			if err != nil {
				return err
			}
			return demo.Run(cmd.Context(), demo.Options{Out: cmd.OutOrStdout(), Repo: root, ParentDir: parent, Wait: wait, RealNode: realNode})
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", true, "keep the cluster running until Ctrl-C")
	cmd.Flags().BoolVar(&realNode, "real-node", false, realNodeFlagHelp)
	return cmd
}

func newDownCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop every cluster started by up or demo, also ones whose terminal was killed",
		RunE: func(cmd *cobra.Command, _ []string) error {
			parent, err := stateDir()
			if err != nil {
				return err
			}
			entries, err := os.ReadDir(parent)
			if os.IsNotExist(err) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, e := range entries {
				dir := filepath.Join(parent, e.Name())
				if err := localcluster.Reap(dir); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "Removed %s\n", dir)
			}
			return nil
		},
	}
}

func newBenchAdmissionCommand() *cobra.Command {
	var (
		rates    string
		duration time.Duration
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "bench-admission",
		Short: "Measure the latency daemonguard's webhooks add to DaemonSet writes through the API server (docs/performance.md)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := apibench.Config{Duration: duration, Progress: cmd.ErrOrStderr()}
			for s := range strings.SplitSeq(rates, ",") {
				r, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || r <= 0 {
					return fmt.Errorf("--rates: %q is not a positive integer", s)
				}
				cfg.Rates = append(cfg.Rates, r)
			}
			rep, err := apibench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.WriteMarkdown(cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&rates, "rates", "10,100,500", "DaemonSet writes per second to step through (creates and updates alternating), comma-separated")
	cmd.Flags().DurationVar(&duration, "duration", 20*time.Second, "duration of each step")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON instead of Markdown")
	return cmd
}
