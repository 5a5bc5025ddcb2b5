package realnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/daemonguard/daemonguard/internal/release"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// The two releases the tests install and upgrade between, tagged as real releases are.
const (
	versionOne = "v0.9.1"
	versionTwo = "v0.9.2"
)

// build is one release build: the image and the chart pinned to it, both pushed.
type build struct {
	version string
	image   release.Image
	chart   release.Chart
}

// pinned is the image reference the chart's pods run: repository@digest.
func (b build) pinned() string {
	return b.image.Ref.Context().Name() + "@" + b.image.Ref.DigestStr()
}

// artifacts are everything the tests install, built once per test process: two releases of
// daemonguard pushed to a registry on loopback the way `make image chart REGISTRY=...` pushes them,
// which the real node's containerd pulls from, and the node agent images, imported into it.
type artifacts struct {
	registry string // host:port of the registry
	releases [2]build
	agents   map[string]nodeimages.Image // by ref
	helmEnv  []string
	helm     string
	cli      string // the daemonguard binary of this checkout, for `daemonguard rollout ...`
}

var shared struct {
	once sync.Once
	a    *artifacts
	err  error
}

// getArtifacts builds the artifacts on first use; a failed build fails every test that needs them.
func getArtifacts(t *testing.T) *artifacts {
	t.Helper()
	shared.once.Do(func() {
		start := time.Now()
		shared.a, shared.err = buildArtifacts(context.Background(), t)
		if shared.err == nil {
			t.Logf("artifacts built, pushed and imported in %s", since(start))
		}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.a
}

func buildArtifacts(ctx context.Context, t *testing.T) (*artifacts, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	// The registry listens on the host's loopback, as release_cluster_test's does; TrustRegistry
	// points the node's containerd at it. It outlives the test that happens to build it: it serves
	// every pull of the process, including the kubelet's after a restart, and dies with the process.
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	a := &artifacts{registry: strings.TrimPrefix(reg.URL, "http://")}
	if err := cluster.TrustRegistry(a.registry); err != nil {
		return nil, fmt.Errorf("let containerd pull from %s: %w", a.registry, err)
	}

	root, err := toolbin.RepoRoot()
	if err != nil {
		return nil, err
	}
	bins, err := toolbin.Ensure(ctx, os.Stderr, "helm")
	if err != nil {
		return nil, err
	}
	a.helm = bins.Path("helm")
	home := filepath.Join(cluster.Dir, "helm")
	a.helmEnv = append(cluster.Env(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))

	for i, version := range []string{versionOne, versionTwo} {
		var logs bytes.Buffer
		o := release.Options{Repo: root, Version: version, Registry: a.registry, Base: release.BaseLocal,
			OutDir: filepath.Join(cluster.Dir, "release-"+version), HelmEnv: a.helmEnv, Log: &logs}
		img, err := o.Image(ctx)
		if err != nil {
			return nil, fmt.Errorf("make image VERSION=%s: %w\n%s", version, err, logs.String())
		}
		chart, err := o.Chart(ctx)
		if err != nil {
			return nil, fmt.Errorf("make chart VERSION=%s: %w\n%s", version, err, logs.String())
		}
		a.releases[i] = build{version: version, image: img, chart: chart}
	}

	images, err := nodeimages.Build(ctx, filepath.Join(cluster.Dir, "nodeimages"))
	if err != nil {
		return nil, fmt.Errorf("build the node images: %w", err)
	}
	a.agents = map[string]nodeimages.Image{}
	for _, img := range images {
		if err := cluster.ImportImage(ctx, img); err != nil {
			return nil, fmt.Errorf("import %s into the real node's containerd: %w", img.Ref, err)
		}
		a.agents[img.Ref] = img
	}
	for _, ref := range []string{nodeimages.AgentV1, nodeimages.AgentV2, nodeimages.AgentCrash} {
		if _, ok := a.agents[ref]; !ok {
			return nil, fmt.Errorf("nodeimages.Build made no %s", ref)
		}
	}

	cli := filepath.Join(cluster.Dir, "daemonguard")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", cli, "./cmd/daemonguard")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/daemonguard: %w\n%s", err, out)
	}
	a.cli = cli
	return a, nil
}

// helmRun runs helm against the cluster with the package's own helm folders.
func (a *artifacts) helmRun(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, a.helm, args...)
	cmd.Env = a.helmEnv
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (a *artifacts) mustHelm(t *testing.T, args ...string) string {
	t.Helper()
	out, err := a.helmRun(context.Background(), args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}
