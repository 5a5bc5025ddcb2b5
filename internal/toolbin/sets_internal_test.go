package toolbin

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// demoRuns is what `make demo` and `make cluster` start (test/localcluster): etcd, the control
// plane and kwok's fake nodes; with REAL_NODE=1 also a kubelet and kube-proxy. The Argo CD,
// cert-manager, helm and ko tests start what they need themselves.
var demoRuns = map[string][]string{
	"":  {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"},
	"1": {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubelet", "kube-proxy"},
}

// On a cold machine every tool is minutes of `make demo`: its build step must ask for what the
// demo runs and nothing else, and Ensure must build nothing beyond it (a binary's whole set is
// built with it).
func TestDemoBuildsOnlyWhatItRuns(t *testing.T) {
	for _, target := range []string{"demo", "cluster"} {
		for realNode, want := range demoRuns {
			t.Run(target+" REAL_NODE="+realNode, func(t *testing.T) {
				out := makeDryRun(t, target, "REAL_NODE="+realNode)
				var builds []string
				for line := range strings.Lines(out) {
					if strings.Contains(line, "testdeps") || strings.Contains(line, "redis-server") {
						t.Errorf("make %s installs what only the Argo CD tests use: %s", target, line)
					}
					// A real node needs Debian's containerd and friends; a kwok-only demo installs nothing.
					if realNode == "" && strings.Contains(line, "apt-get") {
						t.Errorf("make %s installs packages without a real node: %s", target, line)
					}
					if isToolBuild(line) {
						builds = append(builds, strings.TrimSpace(line))
					}
				}
				if len(builds) != 1 {
					t.Fatalf("make %s builds tools %d times, want once:\n%s", target, len(builds), out)
				}
				asked, err := toolsOfCommand(builds[0])
				if err != nil {
					t.Fatal(err)
				}
				built := setsOf(t, asked)
				if !slices.Equal(built, sorted(want)) {
					t.Errorf("make %s builds %v (%q), want exactly what it runs: %v", target, built, builds[0], sorted(want))
				}
			})
		}
	}
}

// On a new machine the demo compiles the standard library once, not once for the tools and again
// for the programs that build and run them: cmd/testbin and cmd/localcluster are compiled as the
// tools are.
func TestDemoCompilesTheWayTheToolsDo(t *testing.T) {
	out := makeDryRun(t, "demo")
	want := append([]string{"CGO_ENABLED=0"}, CompileFlags...)
	seen := map[string]bool{}
	for line := range strings.Lines(out) {
		for cmdLine := range strings.SplitSeq(line, "&") { // the compile runs in the background
			fields := strings.Fields(cmdLine)
			for _, prog := range []string{"./cmd/testbin", "./cmd/localcluster"} {
				if !slices.Contains(fields, prog) {
					continue
				}
				seen[prog] = true
				for _, f := range want {
					if !slices.Contains(fields, f) {
						t.Errorf("make demo compiles %s without %s: %s", prog, f, strings.TrimSpace(cmdLine))
					}
				}
			}
		}
	}
	if !seen["./cmd/testbin"] || !seen["./cmd/localcluster"] {
		t.Errorf("make -n demo compiles neither or only one of cmd/testbin and cmd/localcluster:\n%s", out)
	}
}

// The demo set itself holds none of the tools that only other tests use.
func TestDemoToolsLackTestOnlyTools(t *testing.T) {
	built := setsOf(t, DemoTools)
	for _, tool := range []string{"helm", "ko", "cert-manager", CertManagerCRDs, ArgoCDBinary, ArgoCDCRDs, "kubelet", "kube-proxy"} {
		if slices.Contains(built, tool) {
			t.Errorf("building DemoTools builds %s, which the demo does not run", tool)
		}
	}
	if !slices.Equal(built, sorted(DemoTools)) {
		t.Errorf("building DemoTools builds %v, not just %v", built, sorted(DemoTools))
	}
}

// isToolBuild reports whether a command line runs cmd/testbin or `localcluster build`.
func isToolBuild(line string) bool {
	fields := strings.Fields(line)
	for i, f := range fields {
		if f == "./cmd/testbin" || f == "build" && i > 0 && strings.HasSuffix(fields[i-1], "localcluster") {
			return true
		}
	}
	return false
}

// toolsOfCommand reads the tools a build command line asks for: its --set flags expanded and its
// binaries; every tool when it names none.
func toolsOfCommand(line string) ([]string, error) {
	fields := strings.Fields(line)
	for i, f := range fields {
		if f == "./cmd/testbin" || f == "build" && i > 0 && strings.HasSuffix(fields[i-1], "localcluster") {
			fields = fields[i+1:]
			break
		}
	}
	var names []string
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if strings.ContainsAny(f, ";&|") { // the shell command ends
			break
		}
		set, isSet := strings.CutPrefix(f, "--set=")
		if f == "--set" && i+1 < len(fields) {
			set, isSet = fields[i+1], true
			i++
		}
		if !isSet {
			names = append(names, f)
			continue
		}
		tools, err := ToolSet(set)
		if err != nil {
			return nil, err
		}
		names = append(names, tools...)
	}
	if len(names) == 0 {
		return AllTools(), nil
	}
	return names, nil
}

// setsOf is what Ensure(names...) builds: the binaries of every set it needs and the folders of
// their modules.
func setsOf(t *testing.T, names []string) []string {
	t.Helper()
	b := builder{root: mustRepoRoot(t), cacheRoot: t.TempDir(), modules: toolModules}
	steps, err := b.plan(names)
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]bool{}
	for _, s := range steps {
		for _, set := range s.sets {
			for name := range set.outputs {
				built[name] = true
			}
		}
		for name := range s.module.files {
			built[name] = true
		}
	}
	return slices.Sorted(maps.Keys(built))
}

// makeDryRun returns what `make -n args...` would run in the checkout; it skips the test where
// make is not installed.
func makeDryRun(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	cmd := exec.Command("make", append([]string{"-n"}, args...)...)
	cmd.Dir = mustRepoRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make -n %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func mustRepoRoot(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func sorted(s []string) []string {
	return slices.Sorted(slices.Values(s))
}

// Gatekeeper, which only the peer benchmark runs, is built when named and never with every tool:
// `make test` would pay minutes for a binary no test of it needs.
func TestGatekeeperOnlyWhenNamed(t *testing.T) {
	for _, tool := range []string{GatekeeperBinary, GatekeeperManifests} {
		if slices.Contains(AllTools(), tool) {
			t.Errorf("AllTools holds %s", tool)
		}
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b := builder{root: root, cacheRoot: t.TempDir(), modules: toolModules}
	every, err := b.plan(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range every {
		if s.module.dir == "gatekeeper" {
			t.Error("building every tool builds tools/gatekeeper")
		}
	}
	named, err := b.plan([]string{GatekeeperBinary})
	if err != nil {
		t.Fatal(err)
	}
	if len(named) != 1 || named[0].module.dir != "gatekeeper" {
		t.Errorf("asking for %s plans %d steps, want tools/gatekeeper's", GatekeeperBinary, len(named))
	}
}
