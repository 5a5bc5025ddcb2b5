package toolbin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestExecName(t *testing.T) {
	tests := map[string]struct{ pkg, want string }{
		"a command folder":            {pkg: "k8s.io/kubernetes/cmd/kube-apiserver", want: "kube-apiserver"},
		"a module root":               {pkg: "github.com/google/ko", want: "ko"},
		"a major version suffix":      {pkg: "go.etcd.io/etcd/server/v3", want: "server"},
		"v0 is not a major version":   {pkg: "example.com/x/v0", want: "v0"},
		"a name that starts with v":   {pkg: "example.com/x/vault", want: "vault"},
		"a version alone is the name": {pkg: "v2", want: "v2"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := execName(tc.pkg); got != tc.want {
				t.Errorf("execName(%q) = %q, want %q", tc.pkg, got, tc.want)
			}
		})
	}
}

// Two binaries of one set would overwrite each other in `go build -o DIR`.
func TestExecNamesAreUniquePerModule(t *testing.T) {
	for _, m := range toolModules {
		seen := map[string]string{}
		for _, set := range m.sets {
			for name, pkg := range set.outputs {
				if other, dup := seen[execName(pkg)]; dup {
					t.Errorf("tools/%s: %s and %s both build a binary called %s", m.dir, name, other, execName(pkg))
				}
				seen[execName(pkg)] = name
			}
		}
	}
}

// A set is built on its own when only it is asked for, a later call builds only what is missing,
// and a warm cache builds and prints nothing.
func TestEnsureBuildsEachSetOnce(t *testing.T) {
	root := t.TempDir()
	moduleDir := filepath.Join(root, "tools", "hello")
	write := func(name, content string) { writeFile(t, moduleDir, name, content) }
	write("go.mod", "module example.com/hello\n\ngo 1.26\n")
	write("go.sum", "")
	for _, dir := range []string{"cmd/a", "cmd/b", "server/v2"} {
		write(dir+"/main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\""+dir+"\") }\n")
	}
	var log strings.Builder
	b := builder{
		log: &log, root: root, cacheRoot: filepath.Join(root, "cache"), every: time.Millisecond,
		modules: []toolModule{{dir: "hello", ldflags: "-s -w", sets: []outputSet{
			{name: "first", outputs: map[string]string{"a": "example.com/hello/cmd/a", "srv": "example.com/hello/server/v2"}},
			{name: "second", outputs: map[string]string{"b": "example.com/hello/cmd/b"}},
		}}},
	}
	ctx := context.Background()
	run := func(bins *Binaries, name string) string {
		t.Helper()
		out, err := exec.Command(bins.Path(name)).Output()
		if err != nil {
			t.Fatalf("run %s: %v", name, err)
		}
		return strings.TrimSpace(string(out))
	}

	bins, err := b.ensure(ctx, []string{"srv"})
	if err != nil {
		t.Fatal(err)
	}
	if got := run(bins, "a"); got != "cmd/a" {
		t.Errorf("a printed %q: not the binary of cmd/a", got)
	}
	if got := run(bins, "srv"); got != "server/v2" {
		t.Errorf("srv printed %q: not the binary of server/v2", got)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(bins.Path("a")), "b")); err == nil {
		t.Error("b was built, but only the set of srv was asked for")
	}
	first := log.String()
	for _, want := range []string{"Building first (1 of 1): a, srv from tools/hello", "Still building first (1 of 1): ", "Built first (1 of 1) in "} {
		if !strings.Contains(first, want) {
			t.Errorf("the first build printed no %q:\n%s", want, first)
		}
	}
	if !strings.Contains(first, "new on this machine") {
		t.Errorf("the first build of a set claims an estimate:\n%s", first)
	}
	before, err := os.Stat(bins.Path("a"))
	if err != nil {
		t.Fatal(err)
	}

	log.Reset()
	bins, err = b.ensure(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := run(bins, "b"); got != "cmd/b" {
		t.Errorf("b printed %q: not the binary of cmd/b", got)
	}
	second := log.String()
	if !strings.Contains(second, "Building second (1 of 1): b from") || strings.Contains(second, "first") {
		t.Errorf("asking for everything did not build exactly the missing set:\n%s", second)
	}
	after, err := os.Stat(bins.Path("a"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Error("a was built again")
	}

	log.Reset()
	b.modules[0].sets[0].outputs["c"] = "example.com/hello/cmd/b" // the first set changes, its old binaries stay
	if _, err := b.ensure(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "Building first (1 of 1): a, c, srv from") || !strings.Contains(log.String(), "last time it took ") {
		t.Errorf("a changed set was not rebuilt with the last build time as the estimate:\n%s", log.String())
	}

	log.Reset()
	if _, err := b.ensure(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if log.Len() != 0 {
		t.Errorf("a warm cache printed:\n%s", log.String())
	}

	if _, err := b.ensure(ctx, []string{"a", "nope"}); err == nil || !strings.Contains(err.Error(), `no tools module builds nope`) {
		t.Errorf("asking for an unknown binary: err = %v", err)
	}
}

// A failed build reports the compiler's errors, not the names of the packages it compiled.
func TestEnsureReportsBuildErrors(t *testing.T) {
	root := t.TempDir()
	moduleDir := filepath.Join(root, "tools", "broken")
	if err := os.MkdirAll(filepath.Join(moduleDir, "cmd", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"go.mod":        "module example.com/broken\n\ngo 1.26\n",
		"go.sum":        "",
		"cmd/x/main.go": "package main\n\nimport \"example.com/broken/lib\"\n\nfunc main() { lib.F(undefinedName) }\n",
		"lib/lib.go":    "package lib\n\nfunc F(int) {}\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(moduleDir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(moduleDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var log strings.Builder
	b := builder{log: &log, root: root, cacheRoot: filepath.Join(root, "cache"), every: time.Hour,
		modules: []toolModule{{dir: "broken", sets: []outputSet{{name: "broken", outputs: map[string]string{"x": "example.com/broken/cmd/x"}}}}}}
	_, err := b.ensure(context.Background(), nil)
	if err == nil {
		t.Fatal("a module that does not compile built")
	}
	if !strings.Contains(err.Error(), "undefined: undefinedName") {
		t.Errorf("the error lacks the compiler's message: %v", err)
	}
	if strings.Contains(err.Error(), "\nexample.com/broken/lib\n") {
		t.Errorf("the error lists compiled packages: %v", err)
	}
}

func TestProgressLine(t *testing.T) {
	tests := map[string]struct {
		elapsed                     time.Duration
		downloaded, compiled, total int
		last                        time.Duration
		want                        string
	}{
		"counted, with a last time": {elapsed: 190 * time.Second, compiled: 812, total: 2528, last: 7 * time.Minute,
			want: "Still building the control plane (1 of 2): 3m10s elapsed, 812 of 2528 packages compiled, last time it took 7m"},
		"not counted yet, never built here": {elapsed: 30 * time.Second, compiled: 41,
			want: "Still building the control plane (1 of 2): 30s elapsed, 41 packages compiled"},
		"downloading modules": {elapsed: 30 * time.Second, downloaded: 120,
			want: "Still building the control plane (1 of 2): 30s elapsed, 120 modules downloaded"},
		"nothing to show yet": {elapsed: 30 * time.Second,
			want: "Still building the control plane (1 of 2): 30s elapsed"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := progressLine("the control plane (1 of 2)", tc.elapsed, tc.downloaded, tc.compiled, tc.total, tc.last); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// go build -v names each package it compiles on a line of its own, in chunks that split lines
// anywhere.
func TestProgressCountsCompiledPackages(t *testing.T) {
	p := &progress{}
	for _, chunk := range []string{"go: downloading k8s.io/api v0.36.3\nrun", "time\nk8s.io/api/core/v1\n# example.com/x\n", "x.go:1:2: undefined: y\nexample.com/", "x\n"} {
		if _, err := p.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if p.downloaded != 1 {
		t.Errorf("counted %d module downloads, want 1", p.downloaded)
	}
	if p.compiled != 3 {
		t.Errorf("counted %d packages, want 3 (runtime, k8s.io/api/core/v1, example.com/x)", p.compiled)
	}
	if want := "go: downloading k8s.io/api v0.36.3\n# example.com/x\nx.go:1:2: undefined: y\n"; p.output() != want {
		t.Errorf("kept %q, want %q", p.output(), want)
	}
}

func TestEstimate(t *testing.T) {
	times := buildTimes{"control plane": 420, "node": 300, "control plane+node": 540, "extra": 60}
	tests := map[string]struct {
		sets []string
		want time.Duration // 0: no estimate
	}{
		"a set built before":                    {sets: []string{"control plane"}, want: 7 * time.Minute},
		"sets built together before, any order": {sets: []string{"node", "control plane"}, want: 9 * time.Minute},
		"sets built apart before add up":        {sets: []string{"node", "extra"}, want: 6 * time.Minute},
		"a set never built here":                {sets: []string{"kwok"}},
		"one of the sets never built here":      {sets: []string{"node", "kwok"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := estimate(times, tc.sets); got != tc.want {
				t.Errorf("estimate(%v) = %s, want %s", tc.sets, got, tc.want)
			}
		})
	}
}

func TestBuildTimesRoundTrip(t *testing.T) {
	path := buildTimesFile(t.TempDir(), "kube")
	if len(readBuildTimes(path)) != 0 {
		t.Fatal("times read from a missing file")
	}
	if err := writeBuildTime(path, []string{"node", "control plane"}, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := writeBuildTime(path, []string{"control plane"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := estimate(readBuildTimes(path), []string{"control plane", "node"}); got != 90*time.Second {
		t.Errorf("estimate of the sets built together = %s, want 1m30s", got)
	}
	if got := estimate(readBuildTimes(path), []string{"control plane"}); got != time.Minute {
		t.Errorf("estimate of the set = %s, want 1m", got)
	}
}
