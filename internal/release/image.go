package release

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const (
	// DefaultRepository is where the chart's values point when no registry is named.
	DefaultRepository = "ghcr.io/daemonguard/daemonguard"
	// DistrolessBase is the base image where a registry is reachable: no shell, no package
	// manager, CA certificates and tzdata, user nonroot (65532).
	DistrolessBase = "gcr.io/distroless/static-debian12:nonroot"
	// BaseAuto picks DistrolessBase when its registry answers, else the local base.
	BaseAuto = "auto"
	// BaseLocal always builds on LocalBase.
	BaseLocal = "local"

	// Entrypoint is where ko puts the binary of ./cmd/daemonguard, and the image's entrypoint.
	Entrypoint = "/ko-app/daemonguard"

	mainPackage = "./cmd/daemonguard"
	sourceURL   = "https://github.com/daemonguard/daemonguard"
)

// DefaultPlatform is what `make image` builds for: the platform the chart's nodeSelector allows
// by default.
var DefaultPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}

// ImageOptions say what BuildImage builds and where it puts it.
type ImageOptions struct {
	Repo       string      // the daemonguard checkout; ko runs there with its .ko.yaml
	Ko         string      // the ko binary (make testbin builds it)
	Version    string      // stamped into `daemonguard version`, the image tag and the chart's appVersion
	Revision   string      // the commit, for the revision label; empty leaves the label out
	Repository string      // the image repository, e.g. registry.example.com/team/daemonguard
	Push       bool        // push the image (and its SBOM) to Repository; else only the layout is written
	Base       string      // BaseAuto, BaseLocal or an image reference
	Platform   v1.Platform // the one platform built
	OutDir     string      // where the layout, the SBOM and the reference file go
	KoCache    string      // ko's KOCACHE: built binaries and the base images ko has seen
	Log        io.Writer   // ko's progress
}

// Image is the result of BuildImage.
type Image struct {
	Ref    name.Digest // Repository:Version@sha256:..., the reference the chart pins
	Layout string      // the OCI image layout that holds the image
	SBOM   string      // the SPDX SBOM of the image
	Base   string      // the base image it was built on
}

// Paths inside ImageOptions.OutDir; make chart finds the build of make image through them.
const (
	layoutDir = "image"
	sbomDir   = "sbom"
	refFile   = "image.ref"
)

// BuildImage builds the daemonguard image with ko into an OCI image layout under OutDir, writes
// its SPDX SBOM beside it, records its reference in OutDir/image.ref and, with Push, pushes it.
func BuildImage(ctx context.Context, o ImageOptions) (Image, error) {
	if err := CheckVersion(o.Version); err != nil {
		return Image{}, err
	}
	repo, err := name.NewRepository(o.Repository)
	if err != nil {
		return Image{}, fmt.Errorf("image repository %q: %w", o.Repository, err)
	}
	labels := imageLabels(o.Version, o.Revision)
	base, err := resolveBase(ctx, o)
	if err != nil {
		return Image{}, err
	}
	out := Image{Layout: filepath.Join(o.OutDir, layoutDir), Base: base}
	// A layout keeps every image appended to it; starting empty leaves this build's image alone,
	// and a failed build leaves no reference to an earlier one for make chart to pin.
	for _, dir := range []string{out.Layout, filepath.Join(o.OutDir, sbomDir), filepath.Join(o.OutDir, refFile)} {
		if err := os.RemoveAll(dir); err != nil {
			return Image{}, err
		}
	}
	// ko names what it saved by the layout's path, which must parse as a repository name (no
	// capitals, no leading "/" or ".."): it writes into a staging folder given relative to the
	// checkout, moved to out.Layout afterwards.
	if err := os.MkdirAll(filepath.Join(o.Repo, "bin"), 0o755); err != nil {
		return Image{}, err
	}
	staging, err := os.MkdirTemp(filepath.Join(o.Repo, "bin"), "ko-layout-")
	if err != nil {
		return Image{}, err
	}
	defer os.RemoveAll(staging)
	args := []string{"build", mainPackage, "--bare",
		"--platform", o.Platform.String(),
		"--tags", o.Version,
		"--image-user", NonRootUser,
		"--oci-layout-path", filepath.ToSlash(filepath.Join("bin", filepath.Base(staging))),
		"--sbom", "spdx", "--sbom-dir", filepath.Join(o.OutDir, sbomDir),
		fmt.Sprintf("--push=%t", o.Push),
	}
	for _, l := range labels {
		args = append(args, "--image-label", l)
	}
	cmd := exec.CommandContext(ctx, o.Ko, args...)
	cmd.Dir = o.Repo
	cmd.Env = append(os.Environ(),
		"KO_CONFIG_PATH="+filepath.Join(o.Repo, ".ko.yaml"),
		"KO_DOCKER_REPO="+repo.Name(),
		"KO_DEFAULTBASEIMAGE="+base,
		"KOCACHE="+o.KoCache,
		"VERSION="+o.Version, // read by .ko.yaml's ldflags
	)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = o.Log
	if err := cmd.Run(); err != nil {
		return Image{}, fmt.Errorf("ko %s: %w", strings.Join(args, " "), err)
	}
	digest, err := printedDigest(stdout.String())
	if err != nil {
		return Image{}, fmt.Errorf("ko build: %w", err)
	}
	out.Ref, err = name.NewDigest(repo.Tag(o.Version).String() + "@" + digest.String())
	if err != nil {
		return Image{}, err
	}
	if err := inLayout(staging, digest); err != nil {
		return Image{}, err
	}
	if err := moveDir(staging, out.Layout); err != nil {
		return Image{}, fmt.Errorf("move the OCI layout to %s: %w", out.Layout, err)
	}
	sboms, err := filepath.Glob(filepath.Join(o.OutDir, sbomDir, "*.spdx.json"))
	if err != nil || len(sboms) != 1 {
		return Image{}, fmt.Errorf("ko wrote %d SPDX SBOMs into %s, want 1", len(sboms), filepath.Join(o.OutDir, sbomDir))
	}
	out.SBOM = sboms[0]
	if err := os.WriteFile(filepath.Join(o.OutDir, refFile), []byte(out.Ref.String()+"\n"), 0o644); err != nil {
		return Image{}, err
	}
	return out, nil
}

// BuiltImage reads the reference BuildImage recorded in outDir.
func BuiltImage(outDir string) (name.Digest, error) {
	path := filepath.Join(outDir, refFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return name.Digest{}, fmt.Errorf("no image built into %s yet (run make image first)", outDir)
	}
	if err != nil {
		return name.Digest{}, err
	}
	ref, err := name.NewDigest(strings.TrimSpace(string(data)))
	if err != nil {
		return name.Digest{}, fmt.Errorf("%s: %w", path, err)
	}
	return ref, nil
}

// imageLabels are the org.opencontainers.image.* labels. ko splits --image-label values at
// commas, so none may contain one.
func imageLabels(version, revision string) []string {
	labels := []string{
		"org.opencontainers.image.title=daemonguard",
		"org.opencontainers.image.description=Admission policy and progressive rollouts for Kubernetes DaemonSets",
		"org.opencontainers.image.source=" + sourceURL,
		"org.opencontainers.image.version=" + version,
	}
	if revision != "" {
		labels = append(labels, "org.opencontainers.image.revision="+revision)
	}
	return labels
}

// resolveBase returns the KO_DEFAULTBASEIMAGE for o.Base. The local base is written into ko's
// cache layout and named by digest, which ko then reads from there with no network.
func resolveBase(ctx context.Context, o ImageOptions) (string, error) {
	base := o.Base
	if base == "" || base == BaseAuto {
		probe, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		desc, err := remote.Head(name.MustParseReference(DistrolessBase), remote.WithContext(probe))
		if err == nil {
			return DistrolessBase + "@" + desc.Digest.String(), nil
		}
		fmt.Fprintf(o.Log, "Base image %s is out of reach (%v): building on the local nonroot base instead (no CA certificates, no tzdata). Pass --base to choose.\n", DistrolessBase, err)
		base = BaseLocal
	}
	if base == BaseLocal {
		return WriteLocalBase(filepath.Join(o.KoCache, "img"), o.Platform)
	}
	if _, err := name.ParseReference(base); err != nil {
		return "", fmt.Errorf("base image %q: %w", base, err)
	}
	return base, nil
}

// printedDigest finds the digest in the image reference ko prints as the last line of its output.
func printedDigest(stdout string) (v1.Hash, error) {
	lines := strings.Fields(stdout)
	if len(lines) == 0 {
		return v1.Hash{}, errors.New("printed no image reference")
	}
	last := lines[len(lines)-1]
	at := strings.LastIndex(last, "@")
	if at < 0 {
		return v1.Hash{}, fmt.Errorf("printed %q, which has no digest", last)
	}
	return v1.NewHash(last[at+1:])
}

// inLayout checks that the layout at dir holds the image digest names.
func inLayout(dir string, digest v1.Hash) error {
	path, err := layout.FromPath(dir)
	if err != nil {
		return fmt.Errorf("ko wrote no OCI layout at %s: %w", dir, err)
	}
	if _, err := path.Image(digest); err != nil {
		return fmt.Errorf("the OCI layout %s lacks the image %s ko printed: %w", dir, digest, err)
	}
	return nil
}

// moveDir renames from to to, copying when they are on different file systems.
func moveDir(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	if err := os.Rename(from, to); err == nil {
		return nil
	}
	return os.CopyFS(to, os.DirFS(from))
}
