// Command release builds daemonguard's release artifacts, the image and the Helm chart, without a
// container engine, and pushes them to an OCI registry: `make image` and `make chart` run it.
// The work is in internal/release, which the release-path test runs too.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/daemonguard/daemonguard/internal/release"
	"github.com/daemonguard/daemonguard/internal/toolbin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	var o release.Options
	root := &cobra.Command{
		Use:           "release",
		Short:         "Build daemonguard's image and chart, and push them to a registry",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			repo, err := toolbin.RepoRoot()
			if err != nil {
				return err
			}
			o.Repo, o.Log = repo, cmd.ErrOrStderr()
			if o.OutDir == "" {
				o.OutDir = filepath.Join(repo, "bin", "release")
			}
			return nil
		},
	}
	f := root.PersistentFlags()
	f.StringVar(&o.Version, "version", "", "version stamped into the binary, tagging the image, and the chart's appVersion (make passes git describe)")
	f.StringVar(&o.Registry, "registry", "", "registry to push to, e.g. registry.example.com/team: the image goes to <registry>/daemonguard, the chart to oci://<registry>/charts; empty pushes nothing")
	f.StringVar(&o.OutDir, "out", "", "output folder (default bin/release)")
	_ = root.MarkPersistentFlagRequired("version")

	image := &cobra.Command{
		Use:   "image",
		Short: "Build the image with ko into <out>/image (an OCI image layout) with its SPDX SBOM in <out>/sbom",
		RunE:  func(cmd *cobra.Command, _ []string) error { return buildImage(cmd, &o) },
	}
	image.Flags().StringVar(&o.Base, "base", release.BaseAuto, `base image: "auto" (`+release.DistrolessBase+` when reachable, else "local"), "local" (an empty image running as 65532, made here), or an image reference`)

	chart := &cobra.Command{
		Use:   "chart",
		Short: "Package the chart with the version and the image digest of the last `release image`",
		RunE:  func(cmd *cobra.Command, _ []string) error { return packageChart(cmd, &o) },
	}
	root.AddCommand(image, chart)
	return root
}

// buildImage builds the image: its reference goes to stdout, what it is made of to stderr.
func buildImage(cmd *cobra.Command, o *release.Options) error {
	img, err := o.Image(cmd.Context())
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Image %s\n  base   %s\n  layout %s\n  SBOM   %s\n", img.Ref, img.Base, img.Layout, img.SBOM)
	fmt.Fprintln(cmd.OutOrStdout(), img.Ref)
	return nil
}

// packageChart packages (and pushes) the chart: its path goes to stdout, the version and the
// install command to stderr.
func packageChart(cmd *cobra.Command, o *release.Options) error {
	c, err := o.Chart(cmd.Context())
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "Chart %s version %s\n", c.Path, c.Version)
	if c.Ref != "" {
		fmt.Fprintf(cmd.ErrOrStderr(), "Pushed: helm install daemonguard %s --version %s\n", c.Ref, c.Version)
	}
	fmt.Fprintln(cmd.OutOrStdout(), c.Path)
	return nil
}
