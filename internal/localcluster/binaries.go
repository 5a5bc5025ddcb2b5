package localcluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/mod/modfile"
)

// KubernetesVersion is the version of the control plane built from tools/kube. The Go module proxy
// refuses k8s.io/kubernetes v1.37.x, so the test control plane stays one minor behind the client.
const KubernetesVersion = "v1.36.3"

// toolModule is one module under tools/ and the binaries built from it.
type toolModule struct {
	dir     string            // folder under tools/
	ldflags string            // stamped into every binary of the module
	outputs map[string]string // binary name -> package path
}

var toolModules = []toolModule{
	{
		dir: "kube",
		// Without a stamped version the apiserver reports v0.0.0-master, which kubectl and helm
		// refuse to parse.
		ldflags: "-s -w -X k8s.io/component-base/version.gitVersion=" + KubernetesVersion +
			" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=36" +
			" -X k8s.io/component-base/version.gitTreeState=clean",
		outputs: map[string]string{
			"kube-apiserver":          "k8s.io/kubernetes/cmd/kube-apiserver",
			"kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
			"kube-scheduler":          "k8s.io/kubernetes/cmd/kube-scheduler",
			"etcd":                    "go.etcd.io/etcd/server/v3",
		},
	},
	{
		dir:     "kwok",
		ldflags: "-s -w",
		outputs: map[string]string{"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
	},
	{
		dir:     "helm",
		ldflags: "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0",
		outputs: map[string]string{"helm": "helm.sh/helm/v3/cmd/helm"},
	},
}

// Binaries locates the test binaries built from the tools modules.
type Binaries struct {
	dirs map[string]string // binary name -> folder that holds it
}

// Path returns the absolute path of a built binary such as "kube-apiserver" or "helm".
func (b *Binaries) Path(name string) string {
	return filepath.Join(b.dirs[name], name)
}

// EnsureBinaries builds, or finds already built, the binaries of every tools module that provides
// one of names (all of them when names is empty). Builds are cached per module in the user cache
// dir, keyed by the module's go.mod, go.sum, the Go version and the platform, so a cold machine
// pays the ~12 minute build once and every later run starts in milliseconds. A file lock makes
// concurrent test packages wait for one build instead of racing.
func EnsureBinaries(ctx context.Context, log io.Writer, names ...string) (*Binaries, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	cacheRoot, err := binaryCacheDir()
	if err != nil {
		return nil, err
	}
	wanted := map[string]bool{}
	for _, n := range names {
		wanted[n] = true
	}
	b := &Binaries{dirs: map[string]string{}}
	for _, m := range toolModules {
		needed := len(names) == 0
		for out := range m.outputs {
			if wanted[out] {
				needed = true
				delete(wanted, out)
			}
		}
		if !needed {
			continue
		}
		dir, err := ensureModule(ctx, log, filepath.Join(root, "tools", m.dir), cacheRoot, m)
		if err != nil {
			return nil, err
		}
		for out := range m.outputs {
			b.dirs[out] = dir
		}
	}
	for n := range wanted {
		return nil, fmt.Errorf("no tools module builds %q", n)
	}
	return b, nil
}

func binaryCacheDir() (string, error) {
	if dir := os.Getenv("DAEMONGUARD_BIN_CACHE"); dir != "" {
		return dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find user cache dir for test binaries (set DAEMONGUARD_BIN_CACHE): %w", err)
	}
	return filepath.Join(base, "daemonguard", "bin"), nil
}

func ensureModule(ctx context.Context, log io.Writer, moduleDir, cacheRoot string, m toolModule) (string, error) {
	key, err := moduleKey(moduleDir, m)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cacheRoot, m.dir+"-"+key)
	if complete(dir, m) {
		return dir, nil
	}
	if err := os.MkdirAll(cacheRoot, 0o755); err != nil {
		return "", fmt.Errorf("create binary cache %s: %w", cacheRoot, err)
	}
	unlock, err := lockFile(filepath.Join(cacheRoot, m.dir+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(dir, m) { // another process built it while we waited for the lock
		return dir, nil
	}

	staging, err := os.MkdirTemp(cacheRoot, m.dir+"-building-")
	if err != nil {
		return "", fmt.Errorf("create build dir: %w", err)
	}
	defer os.RemoveAll(staging)
	fmt.Fprintf(log, "Building %s test binaries from tools/%s (cached in %s; a cold build takes minutes)\n", m.dir, m.dir, dir)
	for name, pkg := range m.outputs {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", m.ldflags, "-o", filepath.Join(staging, name), pkg)
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "CGO_ENABLED=0", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("build %s from tools/%s: %w\n%s", name, m.dir, err, out)
		}
	}
	_ = os.RemoveAll(dir) // a partial folder left by a crash
	if err := os.Rename(staging, dir); err != nil {
		return "", fmt.Errorf("move built binaries into %s: %w", dir, err)
	}
	return dir, nil
}

func complete(dir string, m toolModule) bool {
	for name := range m.outputs {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func moduleKey(moduleDir string, m toolModule) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(moduleDir, f))
		if err != nil {
			return "", fmt.Errorf("read tools module: %w", err)
		}
		h.Write(data)
	}
	fmt.Fprintf(h, "%s %s/%s %s", runtime.Version(), runtime.GOOS, runtime.GOARCH, m.ldflags)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// RepoRoot finds the daemonguard checkout: $DAEMONGUARD_REPO, else the nearest parent of the working
// directory whose go.mod declares the product module.
func RepoRoot() (string, error) {
	if dir := os.Getenv("DAEMONGUARD_REPO"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && modfile.ModulePath(data) == "github.com/daemonguard/daemonguard" {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the daemonguard checkout (set DAEMONGUARD_REPO)")
		}
		dir = parent
	}
}
