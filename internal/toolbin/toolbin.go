package toolbin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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
	// ownCode marks a module with Go code of its own rather than only version pins: its .go files
	// are then part of the cache key, so editing them rebuilds the binaries.
	ownCode bool
	// files are folders of a required module copied next to the binaries at build time, for data
	// that must match the built version exactly (cert-manager's CRDs): name -> where to copy from.
	files map[string]moduleFolder
	// kubernetesVersionIn are packages whose k8sVersionMajor and k8sVersionMinor variables are
	// stamped with the Kubernetes version of the k8s.io/client-go the module builds with, as
	// helm's release Makefile does: helm reports that version where no cluster is asked
	// (helm template, helm lint), and checks charts' kubeVersion against it.
	kubernetesVersionIn []string
}

// moduleFolder is a folder inside a module that the tools module requires.
type moduleFolder struct {
	module string // module path, resolved to the version the tools module's go.mod pins
	dir    string // folder inside the module
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
			"kubelet":                 "k8s.io/kubernetes/cmd/kubelet",
			"kube-proxy":              "k8s.io/kubernetes/cmd/kube-proxy",
			"etcd":                    "go.etcd.io/etcd/server/v3",
		},
	},
	{
		dir:     "kwok",
		ldflags: "-s -w",
		outputs: map[string]string{"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
	},
	{
		dir:                 "helm",
		ldflags:             "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0",
		outputs:             map[string]string{"helm": "helm.sh/helm/v3/cmd/helm"},
		kubernetesVersionIn: []string{"helm.sh/helm/v3/pkg/chartutil", "helm.sh/helm/v3/pkg/lint/rules"},
	},
	{
		// ko builds the release image without a container engine (`make image`, internal/release).
		dir:     "ko",
		ldflags: "-s -w -X github.com/google/ko/pkg/commands.Version=v0.19.1",
		outputs: map[string]string{"ko": "github.com/google/ko"},
	},
	{
		// cert-manager's controllers and cainjector in one process (see tools/certmanager), and
		// the CRDs of exactly that version.
		dir:     "certmanager",
		ldflags: "-s -w",
		outputs: map[string]string{"cert-manager": "github.com/daemonguard/daemonguard/tools/certmanager/cmd/cert-manager"},
		ownCode: true,
		files:   map[string]moduleFolder{CertManagerCRDs: {module: "github.com/cert-manager/cert-manager", dir: "deploy/crds"}},
	},
	{
		// Argo CD's application controller and repo server in one binary (see tools/argocd), and
		// the CRDs of exactly that version.
		dir:     "argocd",
		ldflags: "-s -w",
		outputs: map[string]string{ArgoCDBinary: "github.com/daemonguard/daemonguard/tools/argocd/cmd/argocd"},
		ownCode: true,
		files:   map[string]moduleFolder{ArgoCDCRDs: {module: "github.com/argoproj/argo-cd/v3", dir: "manifests/crds"}},
	},
}

// ArgoCDBinary names the binary of Argo CD's application controller and repo server.
const ArgoCDBinary = "argocd"

// ArgoCDCRDs names the folder of Argo CD's CRDs built with the argocd binary.
const ArgoCDCRDs = "argocd-crds"

// CertManagerCRDs names the folder of cert-manager's CRDs built with the cert-manager binary;
// Binaries.Path(CertManagerCRDs) locates it.
const CertManagerCRDs = "cert-manager-crds"

// Binaries locates the test binaries built from the tools modules.
type Binaries struct {
	dirs map[string]string // binary name -> folder that holds it
}

// Path returns the absolute path of a built binary such as "kube-apiserver" or "helm", or of a
// folder copied with one (CertManagerCRDs).
func (b *Binaries) Path(name string) string {
	return filepath.Join(b.dirs[name], name)
}

// Ensure builds, or finds already built, the binaries of every tools module that provides
// one of names (all of them when names is empty). Builds are cached per module in the user cache
// dir, keyed by the module's go.mod, go.sum, the Go version and the platform, so a cold machine
// pays the ~12 minute build once and every later run starts in milliseconds. A file lock makes
// concurrent test packages wait for one build instead of racing.
func Ensure(ctx context.Context, log io.Writer, names ...string) (*Binaries, error) {
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
		for out := range m.products() {
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
		for out := range m.products() {
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
	ldflags, err := m.buildLDFlags(moduleDir)
	if err != nil {
		return "", err
	}
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
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", filepath.Join(staging, name), pkg)
		cmd.Dir = moduleDir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "CGO_ENABLED=0", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("build %s from tools/%s: %w\n%s", name, m.dir, err, out)
		}
	}
	for name, from := range m.files {
		if err := copyModuleFolder(ctx, moduleDir, from, filepath.Join(staging, name)); err != nil {
			return "", fmt.Errorf("copy %s from tools/%s: %w", name, m.dir, err)
		}
	}
	_ = os.RemoveAll(dir) // a partial folder left by a crash
	if err := os.Rename(staging, dir); err != nil {
		return "", fmt.Errorf("move built binaries into %s: %w", dir, err)
	}
	return dir, nil
}

// products lists what the module puts into its cache folder: binaries and copied folders.
func (m toolModule) products() map[string]bool {
	p := map[string]bool{}
	for name := range m.outputs {
		p[name] = true
	}
	for name := range m.files {
		p[name] = true
	}
	return p
}

func complete(dir string, m toolModule) bool {
	for name := range m.outputs {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	for name := range m.files {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// copyModuleFolder copies the regular files of a folder of a required module, at the version the
// tools module in moduleDir resolves, into to. It runs right after the build, which has just put
// that module into the module cache.
func copyModuleFolder(ctx context.Context, moduleDir string, from moduleFolder, to string) error {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", from.module)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("locate module %s: %w", from.module, err)
	}
	src := filepath.Join(strings.TrimSpace(string(out)), filepath.FromSlash(from.dir))
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(to, 0o755); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		// Module cache files are read-only; the copies are not, so the cache can be cleaned.
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleKey hashes what decides a module's build: go.mod, go.sum, the Go version, the platform and
// the ldflags; for a module with code of its own also its .go files, and the folders it copies.
func moduleKey(moduleDir string, m toolModule) (string, error) {
	ldflags, err := m.buildLDFlags(moduleDir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(moduleDir, f))
		if err != nil {
			return "", fmt.Errorf("read tools module: %w", err)
		}
		h.Write(data)
	}
	fmt.Fprintf(h, "%s %s/%s %s", runtime.Version(), runtime.GOOS, runtime.GOARCH, ldflags)
	if m.ownCode {
		if err := hashGoFiles(h, moduleDir); err != nil {
			return "", fmt.Errorf("hash tools module %s: %w", m.dir, err)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.files)) {
		fmt.Fprintf(h, "\nfiles %s %s %s", name, m.files[name].module, m.files[name].dir)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// buildLDFlags returns the module's ldflags with the Kubernetes version stamped into the packages
// of kubernetesVersionIn.
func (m toolModule) buildLDFlags(moduleDir string) (string, error) {
	if len(m.kubernetesVersionIn) == 0 {
		return m.ldflags, nil
	}
	path := filepath.Join(moduleDir, "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read tools module: %w", err)
	}
	f, err := modfile.ParseLax(path, data, nil)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	var clientGo string
	for _, r := range f.Require {
		if r.Mod.Path == "k8s.io/client-go" {
			clientGo = r.Mod.Version
		}
	}
	major, minor, err := kubernetesVersionOfClientGo(clientGo)
	if err != nil {
		return "", fmt.Errorf("tools/%s: %w", m.dir, err)
	}
	flags := m.ldflags
	for _, pkg := range m.kubernetesVersionIn {
		flags += fmt.Sprintf(" -X %s.k8sVersionMajor=%d -X %s.k8sVersionMinor=%d", pkg, major, pkg, minor)
	}
	return flags, nil
}

// kubernetesVersionOfClientGo maps a k8s.io/client-go version to the Kubernetes release it comes
// with: v0.N.P is Kubernetes 1.N.
func kubernetesVersionOfClientGo(version string) (major, minor int, err error) {
	var patch int
	if _, err := fmt.Sscanf(version, "v0.%d.%d", &minor, &patch); err != nil || minor <= 0 {
		return 0, 0, fmt.Errorf("k8s.io/client-go version %q is not v0.N.P (go.mod requires it?)", version)
	}
	return 1, minor, nil
}

// hashGoFiles writes the path and content of every .go file below dir into h, in walk order
// (lexical, so stable).
func hashGoFiles(h io.Writer, dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		fmt.Fprintf(h, "\n%s %d\n", filepath.ToSlash(rel), len(data))
		_, err = h.Write(data)
		return err
	})
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
