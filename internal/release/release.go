// Package release builds daemonguard's release artifacts without a container engine: the image,
// built by ko into an OCI image layout with an SPDX SBOM beside it, and the Helm chart, packaged
// with the image's version and digest; both are pushed to an OCI registry when one is named.
// `make image` and `make chart` (through cmd/release) and the release-path test run this code.
package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// Options are the inputs of a release build, as `make image` and `make chart` pass them.
type Options struct {
	Repo     string // the daemonguard checkout
	Version  string // from git describe: stamped into the binary, the image tag and the chart
	Registry string // e.g. registry.example.com/team; empty builds without pushing
	Base     string // BaseAuto (default), BaseLocal or an image reference
	OutDir   string // bin/release: the image layout, SBOM, image.ref, the chart .tgz and ko's cache
	HelmEnv  []string
	Log      io.Writer
}

// Repository is where the image goes: <Registry>/daemonguard, or DefaultRepository.
func (o Options) Repository() string {
	if o.Registry == "" {
		return DefaultRepository
	}
	return o.Registry + "/daemonguard"
}

// Image builds (and with a Registry pushes) the image.
func (o Options) Image(ctx context.Context) (Image, error) {
	bins, err := toolbin.Ensure(ctx, o.Log, "ko")
	if err != nil {
		return Image{}, err
	}
	revision, err := gitRevision(ctx, o.Repo)
	if err != nil {
		fmt.Fprintf(o.Log, "No commit for the revision label: %v\n", err)
	}
	return BuildImage(ctx, ImageOptions{
		Repo: o.Repo, Ko: bins.Path("ko"), Version: o.Version, Revision: revision,
		Repository: o.Repository(), Push: o.Registry != "", Base: o.Base, Platform: DefaultPlatform,
		OutDir: o.OutDir, KoCache: filepath.Join(o.OutDir, "kocache"), Log: o.Log,
	})
}

// Chart packages (and with a Registry pushes) the chart pinned to the image Image built last
// into OutDir.
func (o Options) Chart(ctx context.Context) (Chart, error) {
	image, err := BuiltImage(o.OutDir)
	if err != nil {
		return Chart{}, err
	}
	// The chart pins the image of this very build: same repository, same version.
	if want := o.Repository() + ":" + o.Version + "@"; !strings.HasPrefix(image.String(), want) {
		return Chart{}, fmt.Errorf("the image last built into %s is %s, not %s...: run make image with the same VERSION and REGISTRY first", o.OutDir, image, want)
	}
	bins, err := toolbin.Ensure(ctx, o.Log, "helm")
	if err != nil {
		return Chart{}, err
	}
	env := o.HelmEnv
	if env == nil {
		env = os.Environ()
	}
	return PackageChart(ctx, ChartOptions{
		Helm: bins.Path("helm"), ChartDir: filepath.Join(o.Repo, "charts", "daemonguard"),
		Version: o.Version, Image: image, OutDir: o.OutDir, Registry: o.Registry, Env: env, Log: o.Log,
	})
}

func gitRevision(ctx context.Context, repo string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "rev-parse", "HEAD")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
