// Package toolbin builds the test binaries (the control plane, helm, Argo CD, cert-manager ...)
// from the tools modules and caches them (toolbin.go: Ensure, Binaries), declares what each tools
// module builds and which Kubernetes versions (modules.go), names the tool sets the entry points
// build (sets.go), reports a long build's progress (progress.go), and finds the checkout the
// tests read from (RepoRoot, RepoPath). Neither the product binaries nor their packages import it.
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
	"testing"
	"time"

	"golang.org/x/mod/modfile"
)

// Binaries locates the test binaries built from the tools modules.
type Binaries struct {
	dirs map[string]string // binary name -> folder that holds it
}

// Path returns the absolute path of a built binary such as "kube-apiserver" or "helm", or of a
// folder copied with one (CertManagerCRDs).
func (b *Binaries) Path(name string) string {
	return filepath.Join(b.dirs[name], name)
}

// Ensure builds, or finds already built, the binaries names (every tool when names is empty)
// and what comes with them: the rest of a binary's set (asking for kube-apiserver gives the whole
// control plane) and its module's copied folders. Builds are cached in the user cache dir, per
// module in a folder keyed by the module's go.mod, go.sum, the Go version, the platform and the
// ldflags, and in it per set, so building the demo's tools first and the test suite's later
// builds nothing twice; a cold machine pays each build once and every later run starts in
// milliseconds. A file lock per module makes concurrent test packages wait for one build instead
// of racing. A build prints what it builds and, while it runs, how far it is; a warm cache
// prints nothing.
func Ensure(ctx context.Context, log io.Writer, names ...string) (*Binaries, error) {
	b, err := newBuilder(log)
	if err != nil {
		return nil, err
	}
	return b.ensure(ctx, names)
}

// newBuilder builds this checkout's tools modules into the binary cache, logging to log.
func newBuilder(log io.Writer) (builder, error) {
	root, err := RepoRoot()
	if err != nil {
		return builder{}, err
	}
	cacheRoot, err := CacheDir("DAEMONGUARD_BIN_CACHE", "bin", "test binaries")
	if err != nil {
		return builder{}, err
	}
	return builder{log: log, root: root, cacheRoot: cacheRoot, modules: toolModules, every: progressEvery}, nil
}

// progressEvery is how often a running build says how far it is.
const progressEvery = 30 * time.Second

// builder builds the sets of tools modules into the binary cache.
type builder struct {
	log       io.Writer
	root      string // the checkout holding tools/
	cacheRoot string
	modules   []toolModule
	every     time.Duration // how often a running build reports progress
}

// buildStep is what one module must provide for a call: the sets asked for and the cache folder
// of the module's key.
type buildStep struct {
	module    toolModule
	moduleDir string
	dir       string
	sets      []outputSet
}

func (b builder) ensure(ctx context.Context, names []string) (*Binaries, error) {
	steps, err := b.plan(names)
	if err != nil {
		return nil, err
	}
	var todo []buildStep
	for _, s := range steps {
		if len(s.missing()) > 0 {
			todo = append(todo, s)
		}
	}
	for i, s := range todo {
		if err := b.build(ctx, s, i+1, len(todo)); err != nil {
			return nil, err
		}
	}
	return binariesOf(steps), nil
}

// Cached locates the binaries names and what comes with them, as Ensure does, if they are already
// built, and builds nothing: a test that needs a tool no other entry point builds (Gatekeeper,
// built by `make bench-peers`) uses it to skip instead of paying minutes of build.
func Cached(names ...string) (*Binaries, error) {
	b, err := newBuilder(io.Discard)
	if err != nil {
		return nil, err
	}
	steps, err := b.plan(names)
	if err != nil {
		return nil, err
	}
	for _, s := range steps {
		if missing := s.missing(); len(missing) > 0 {
			return nil, fmt.Errorf("%s from tools/%s is not built yet", missing[0].name, s.module.dir)
		}
	}
	return binariesOf(steps), nil
}

// binariesOf locates the binaries and folders of steps in their cache folders.
func binariesOf(steps []buildStep) *Binaries {
	bins := &Binaries{dirs: map[string]string{}}
	for _, s := range steps {
		for _, set := range s.sets {
			for name := range set.outputs {
				bins.dirs[name] = s.dir
			}
		}
		for name := range s.module.files {
			bins.dirs[name] = s.dir
		}
	}
	return bins
}

// plan lists, per module, the sets that provide names (all sets when names is empty) and the
// cache folder they belong in.
func (b builder) plan(names []string) ([]buildStep, error) {
	unknown := map[string]bool{}
	for _, n := range names {
		unknown[n] = true
	}
	var steps []buildStep
	for _, m := range b.modules {
		var sets []outputSet
		for i, set := range m.sets {
			needed := len(names) == 0 && !m.onlyNamed
			for _, n := range names {
				_, built := set.outputs[n]
				_, copied := m.files[n]
				if built || copied && i == 0 { // the module's folders come with every set; ask the first
					needed = true
					delete(unknown, n)
				}
			}
			if needed {
				sets = append(sets, set)
			}
		}
		if len(sets) == 0 {
			continue
		}
		moduleDir := filepath.Join(b.root, "tools", m.dir)
		key, err := moduleKey(moduleDir, m)
		if err != nil {
			return nil, err
		}
		steps = append(steps, buildStep{module: m, moduleDir: moduleDir, dir: filepath.Join(b.cacheRoot, m.dir+"-"+key), sets: sets})
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("no tools module builds %s", strings.Join(slices.Sorted(maps.Keys(unknown)), ", "))
	}
	return steps, nil
}

// missing returns the step's sets that are not complete in its cache folder.
func (s buildStep) missing() []outputSet {
	var missing []outputSet
	for _, set := range s.sets {
		if !complete(s.dir, s.module, set) {
			missing = append(missing, set)
		}
	}
	return missing
}

// CacheDir is the folder named by the environment variable env, else the user cache dir's
// daemonguard/name: where the tools (bin) and the test images (images) are kept between runs.
// what says what is kept there, for the error.
func CacheDir(env, name, what string) (string, error) {
	if dir := os.Getenv(env); dir != "" {
		return dir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find user cache dir for %s (set %s): %w", what, env, err)
	}
	return filepath.Join(base, "daemonguard", name), nil
}

// build builds the missing sets of step n of of with one `go build`, and moves the binaries and
// the module's folders into the cache folder one by one, so a reader never sees a partial binary.
func (b builder) build(ctx context.Context, s buildStep, n, of int) error {
	m := s.module
	ldflags, err := m.buildLDFlags(s.moduleDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("create binary cache %s: %w", s.dir, err)
	}
	unlock, err := lockFile(filepath.Join(b.cacheRoot, m.dir+".lock"))
	if err != nil {
		return err
	}
	defer unlock()
	missing := s.missing()
	if len(missing) == 0 { // another process built them while we waited for the lock
		return nil
	}
	staging, err := os.MkdirTemp(b.cacheRoot, m.dir+"-building-")
	if err != nil {
		return fmt.Errorf("create build dir: %w", err)
	}
	defer os.RemoveAll(staging)

	outputs := map[string]string{}
	var setNames []string
	for _, set := range missing {
		maps.Copy(outputs, set.outputs)
		setNames = append(setNames, set.name)
	}
	names := slices.Sorted(maps.Keys(outputs))
	pkgs := make([]string, len(names))
	for i, name := range names {
		pkgs[i] = outputs[name]
	}
	times := buildTimesFile(b.cacheRoot, m.dir)
	p := &progress{
		log: b.log, what: inWords(setNames), step: n, steps: of,
		last: estimate(readBuildTimes(times), setNames), every: b.every,
	}
	fmt.Fprintf(b.log, "Building %s: %s from tools/%s into %s%s\n", p.title(), strings.Join(names, ", "), m.dir, s.dir, p.lastTime())
	p.start(ctx, s.moduleDir, pkgs)
	args := append(append([]string{"build", "-v"}, CompileFlags...), "-ldflags", ldflags, "-o", staging)
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = s.moduleDir
	cmd.Env = append(os.Environ(), goEnv...)
	cmd.Stdout, cmd.Stderr = p, p // one writer: go build -v names each package it compiles
	err = cmd.Run()
	took := p.stop()
	if err != nil {
		return fmt.Errorf("build %s from tools/%s: %w\n%s", strings.Join(names, ", "), m.dir, err, p.output())
	}

	for name, from := range m.files {
		if fi, err := os.Stat(filepath.Join(s.dir, name)); err == nil && fi.IsDir() {
			continue
		}
		if err := copyModuleFolder(ctx, s.moduleDir, from, filepath.Join(staging, name)); err != nil {
			return fmt.Errorf("copy %s from tools/%s: %w", name, m.dir, err)
		}
		_ = os.RemoveAll(filepath.Join(s.dir, name)) // a partial folder left by a crash
		if err := os.Rename(filepath.Join(staging, name), filepath.Join(s.dir, name)); err != nil {
			return fmt.Errorf("move %s into %s: %w", name, s.dir, err)
		}
	}
	for name, pkg := range outputs {
		if err := os.Rename(filepath.Join(staging, execName(pkg)), filepath.Join(s.dir, name)); err != nil {
			return fmt.Errorf("move built %s into %s: %w", name, s.dir, err)
		}
	}
	if err := writeBuildTime(times, setNames, took); err != nil {
		fmt.Fprintf(b.log, "Could not record the build time for progress estimates: %v\n", err)
	}
	fmt.Fprintf(b.log, "Built %s in %s\n", p.title(), took.Round(time.Second))
	return nil
}

// inWords lists names as a sentence does: "a", "a and b", "a, b and c".
func inWords(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// goEnv builds every tool the same way: static, from the pinned go.sum, outside any workspace.
var goEnv = []string{"GOFLAGS=-mod=readonly", "CGO_ENABLED=0", "GOWORK=off"}

// CompileFlags are how every tool is compiled. The binaries are stripped (every module's ldflags
// have -s -w), so the DWARF the compiler writes would be thrown away at link: not writing it cuts
// the CPU of a cold build by a sixth (docs/performance.md). cmd/testbin and cmd/localcluster are
// compiled with the same flags and CGO_ENABLED=0 (the Makefile's STATIC_GO), so on a new machine
// the standard library is compiled once for all of them.
var CompileFlags = []string{"-trimpath", "-gcflags=all=-dwarf=false"}

// execName is the name `go build -o DIR` gives the binary of a main package: the last element of
// its path, or the one before a major version suffix (go.etcd.io/etcd/server/v3 -> server).
func execName(pkg string) string {
	elems := strings.Split(pkg, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && isMajorVersion(last) {
		return elems[len(elems)-2]
	}
	return last
}

func isMajorVersion(s string) bool {
	if len(s) < 2 || s[0] != 'v' || s[1] < '1' || s[1] > '9' {
		return false
	}
	for _, c := range s[2:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// complete reports whether every binary of set and every folder of its module is in dir.
func complete(dir string, m toolModule, set outputSet) bool {
	for name := range set.outputs {
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
	cmd.Env = append(os.Environ(), goEnv...)
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
	fmt.Fprintf(h, "%s %s/%s %s %s", runtime.Version(), runtime.GOOS, runtime.GOARCH, strings.Join(CompileFlags, " "), ldflags)
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
	clientGo, err := requiredVersion(moduleDir, "k8s.io/client-go")
	if err != nil {
		return "", err
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

// PinnedVersion returns the version of module that the tools module tools/dir requires, such as
// "v3.23.1" of github.com/open-policy-agent/gatekeeper/v3 for "gatekeeper": what a benchmark
// reports it ran.
func PinnedVersion(dir, module string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	v, err := requiredVersion(filepath.Join(root, "tools", dir), module)
	if err != nil {
		return "", err
	}
	if v == "" {
		return "", fmt.Errorf("tools/%s requires no %s", dir, module)
	}
	return v, nil
}

// requiredVersion returns the version of module that the go.mod in moduleDir requires, or "" when
// it requires none.
func requiredVersion(moduleDir, module string) (string, error) {
	path := filepath.Join(moduleDir, "go.mod")
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read tools module: %w", err)
	}
	f, err := modfile.ParseLax(path, data, nil)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	for _, r := range f.Require {
		if r.Mod.Path == module {
			return r.Mod.Version, nil
		}
	}
	return "", nil
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

// RepoPath is RepoRoot joined with parts, for tests: it fails t where there is no checkout.
func RepoPath(t testing.TB, parts ...string) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root}, parts...)...)
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
