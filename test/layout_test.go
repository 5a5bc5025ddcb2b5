// Package test holds daemonguard's test bench apart from the product: the local control plane
// (localcluster), the harness that runs daemonguard's components against it, the helpers every
// test on it shares (clustertest: kubectl, the seed DaemonSet, the budget sampler), the webhook
// registration and readiness probes they share (webhookreg), the demo, the admission load
// generator (loadgen), the API server benchmark (apibench), the 1,000-node rollout benchmark
// (rolloutbench), the benchmark of `rollout plan` (planbench), the 5,000-node scale benchmark
// (scalebench), the benchmark against Gatekeeper and a null webhook (peerbench) and the real
// Prometheus for tests (promtest). layout_test.go checks that the shipped binaries link none of
// it, that `rollout plan` links no controller manager, that the rollout's layers import only
// downward (TestArrowsPointDown), and how many packages and files a review, a reconcile and a plan
// run cross; naming_test.go that every test file needing the local control plane, and only those,
// is named *_cluster_test.go; names_test.go that no two product packages export the same name
// (TestExportedNamesMeanOneThing); clustertest_test.go that cluster tests share clustertest's
// helpers; docs_test.go that the docs name only what exists.
package test

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/daemonguard/daemonguard"

// TestProductLinksNoBench lists the packages each shipped binary and the release tool link, and
// fails on any package of the bench (test/...) or of the pinned tool builds (internal/toolbin,
// which builds the control plane's binaries): the product must build and run without them.
func TestProductLinksNoBench(t *testing.T) {
	for name, tc := range map[string]struct {
		pkg       string
		forbidden []string // import path prefixes, below the module
	}{
		"the daemonguard binary": {
			pkg: "/cmd/daemonguard", forbidden: []string{"/test/", "/internal/toolbin"},
		},
		"the kubectl plugin": {
			pkg: "/cmd/kubectl-daemonguard", forbidden: []string{"/test/", "/internal/toolbin"},
		},
		// make image / make chart find ko and helm through toolbin, never through the test
		// cluster.
		"the release tool": {
			pkg: "/cmd/release", forbidden: []string{"/test/"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+tc.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", tc.pkg, errText(err))
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 || deps[len(deps)-1] != module+tc.pkg {
				t.Fatalf("go list -deps %s listed %d packages, not ending in the package itself", tc.pkg, len(deps))
			}
			for _, dep := range deps {
				for _, prefix := range tc.forbidden {
					if strings.HasPrefix(dep, module+prefix) {
						t.Errorf("%s links %s", module+tc.pkg, dep)
					}
				}
			}
		})
	}
}

// errText adds what go list wrote to stderr to its exit error.
func errText(err error) string {
	if exit, ok := err.(*exec.ExitError); ok {
		return err.Error() + ": " + strings.TrimSpace(string(exit.Stderr))
	}
	return err.Error()
}

// TestPlanLinksNoControllerManager holds `rollout plan` apart from the controller process: the
// plan runs the controller's planner (controller/rolloutplan), never the controller package that
// wires it into a manager, nor controller-runtime's manager, nor the HTTP adapters (package
// webhook): it finds daemonguard's webhooks by the names in internal/admission.
func TestPlanLinksNoControllerManager(t *testing.T) {
	for _, pkg := range []string{"/internal/preflight", "/internal/rolloutcli"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, errText(err))
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+"/controller/rollout" || dep == module+"/webhook" || dep == "sigs.k8s.io/controller-runtime/pkg/manager" {
				t.Errorf("%s links %s", module+pkg, dep)
			}
		}
	}
}

// TestArrowsPointDown holds the rollout's layers apart: controller/rollout -> the planner
// (controller/rolloutplan) -> the analysis gates' vocabulary (internal/rolloutanalysis) <- the
// Prometheus client (internal/promquery). The client links nothing of the planner or the
// controller, and the planner and the vocabulary link no Kubernetes or Prometheus client: they
// take plain data and a clock.
func TestArrowsPointDown(t *testing.T) {
	// clients are import path prefixes of the clients the pure layers must not link. The
	// Prometheus client is its HTTP API (client_golang/api); Prometheus' PromQL parser, which the
	// gates' scope uses, links client_golang's metrics library, which makes no request.
	clients := []string{"k8s.io/client-go/", "sigs.k8s.io/controller-runtime/", "github.com/prometheus/client_golang/api"}
	controller, planner, client := module+"/controller/rollout", module+"/controller/rolloutplan", module+"/internal/promquery"
	for pkg, forbidden := range map[string][]string{
		"/internal/promquery":       {planner, controller},
		"/internal/rolloutanalysis": append([]string{planner, controller, client}, clients...),
		"/controller/rolloutplan":   append([]string{controller, client}, clients...),
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, errText(err))
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if dep == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(dep, f)) {
					t.Errorf("%s links %s", module+pkg, dep)
				}
			}
		}
	}
}

// engines are the module packages a run calls as a library with its own documentation and tests:
// the policy engine. A run's files count the engine's entry files, those declaring what the run
// calls, not the engine's insides (compiling, sandboxing and evaluating Rego), which no run's
// reader has to follow to know what the run does.
var engines = []string{"/internal/policy"}

// The goals of TestRunsCrossFewFiles: how many rooms (packages) and files a reader should have to
// open to follow a run from its entry to the last function it can execute, counting every product
// package, the shared vocabulary (annotation codec, gate scope, node rules, text helpers, manifest
// reader) included. Each package goal names the rooms the run needs by design; a run that enters
// another has grown a job that belongs elsewhere.
const (
	// A validating review: the HTTP adapter (webhook), the admission core, the policy engine's
	// entry, and what the core checks before any policy: the rollout API (annotations, their size
	// limits, the gate syntax), the gates' scope (rolloutanalysis), the node rules and one text
	// helper.
	reviewPackagesGoal = 7
	// A reconcile: the controller (gather, decide, apply), the planner, the gates' vocabulary and
	// the Prometheus client that measures a due gate, the rollout API it reads and writes, the node
	// rules, the namespace mark (admission's one definition) and one text helper.
	reconcilePackagesGoal = 8
	// A `rollout plan` run: the pre-flight command, the admission core it asks what the webhook
	// would answer with the policy engine's entry, the controller's planner with its forecast, the
	// gates' vocabulary and the Prometheus client that measures them today, the rollout API, the
	// node rules, the manifest reader and the text helpers.
	planPackagesGoal = 10
	// filesPerRoomGoal bounds the files a run reads per room it enters: a room shows its job in a
	// few files, one per step (the controller's gather, decide and apply; the planner's state,
	// plan and analysis). A run that needs more has spread one job over many small files.
	filesPerRoomGoal = 3
)

// TestRunsCrossFewFiles counts the files one run of a job crosses, so a reader follows it through
// a handful of rooms, and fails when the job spreads past its goal (the constants above): more
// packages than its goal, or more than filesPerRoomGoal files per package of that goal. A file
// counts when the run can execute a function or method declared in it: from the entry, every
// function of the module that a reached body names (called or passed on; an interface method
// stands for every implementation in the module) is reached in turn. Every product package is
// counted; the engines' functions are counted and not followed. It reads the source and the
// compiler's export data, no cluster.
func TestRunsCrossFewFiles(t *testing.T) {
	for name, tc := range map[string]struct {
		pkg, entry string // the entry: a function, or Type.Method
		maxPkgs    int
		forbidden  []string // packages the run must not enter
	}{
		"rollout plan": {pkg: "/internal/preflight", entry: "NewPlanCommand", maxPkgs: planPackagesGoal,
			forbidden: []string{"/controller/rollout", "/internal/cli", "/webhook"}},
		"a validating review": {pkg: "/webhook", entry: "DaemonSetValidator.Handle", maxPkgs: reviewPackagesGoal},
		"a reconcile":         {pkg: "/controller/rollout", entry: "Reconciler.Reconcile", maxPkgs: reconcilePackagesGoal},
	} {
		t.Run(name, func(t *testing.T) {
			files := crossedFiles(t, module+tc.pkg, tc.entry)
			pkgs := map[string]bool{}
			for _, f := range files {
				pkgs[filepath.Dir(f)] = true
			}
			t.Logf("%d files in %d packages: %s", len(files), len(pkgs), strings.Join(files, " "))
			if maxFiles := tc.maxPkgs * filesPerRoomGoal; len(files) > maxFiles || len(pkgs) > tc.maxPkgs {
				t.Errorf("%s crosses %d files in %d packages, want at most %d in %d", name, len(files), len(pkgs), maxFiles, tc.maxPkgs)
			}
			for _, f := range files {
				for _, p := range tc.forbidden {
					if filepath.Dir(f) == strings.TrimPrefix(p, "/") {
						t.Errorf("%s enters %s (%s)", name, p, f)
					}
				}
			}
		})
	}
}

// crossedFiles is the files, relative to the module root and sorted, whose functions a run from
// entry in pkg can execute.
func crossedFiles(t *testing.T, pkg, entry string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export", pkg).Output()
	if err != nil {
		t.Fatalf("go list -export -deps %s: %v", pkg, errText(err))
	}
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
	}
	exports := map[string]string{}
	var own []listed // the module's packages, dependencies first
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if p.ImportPath == module || strings.HasPrefix(p.ImportPath, module+"/") {
			own = append(own, p)
		}
	}
	fset := token.NewFileSet()
	gc := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) { return os.Open(exports[path]) })
	checked := map[string]*types.Package{}
	imp := importerFunc(func(path string) (*types.Package, error) {
		if p, ok := checked[path]; ok {
			return p, nil
		}
		return gc.Import(path)
	})
	type decl struct {
		body *ast.FuncDecl
		info *types.Info
		file string
	}
	decls := map[*types.Func]decl{}
	var named []*types.Named // the module's named types, for interface methods
	for _, p := range own {
		var syntax []*ast.File
		for _, f := range p.GoFiles {
			file, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			syntax = append(syntax, file)
		}
		info := &types.Info{Defs: map[*ast.Ident]types.Object{}, Uses: map[*ast.Ident]types.Object{}}
		checkedPkg, err := (&types.Config{Importer: imp}).Check(p.ImportPath, fset, syntax, info)
		if err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		checked[p.ImportPath] = checkedPkg
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		for i, file := range syntax {
			for _, d := range file.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					decls[info.Defs[fd.Name].(*types.Func)] = decl{fd, info, filepath.ToSlash(filepath.Join(rel, p.GoFiles[i]))}
				}
			}
		}
		for _, n := range checkedPkg.Scope().Names() {
			if tn, ok := checkedPkg.Scope().Lookup(n).(*types.TypeName); ok {
				if nt, ok := tn.Type().(*types.Named); ok && !types.IsInterface(nt) {
					named = append(named, nt)
				}
			}
		}
	}
	// implementations is every method of the module's types that an interface method stands for.
	implementations := func(m *types.Func) []*types.Func {
		recv := m.Signature().Recv()
		if recv == nil {
			return nil
		}
		iface, _ := recv.Type().Underlying().(*types.Interface)
		if iface == nil {
			return nil
		}
		var out []*types.Func
		for _, nt := range named {
			for _, t := range []types.Type{nt, types.NewPointer(nt)} {
				if types.Implements(t, iface) {
					if obj, _, _ := types.LookupFieldOrMethod(t, true, nt.Obj().Pkg(), m.Name()); obj != nil {
						out = append(out, obj.(*types.Func))
					}
					break
				}
			}
		}
		return out
	}
	start := lookupEntry(t, checked[pkg], entry)
	reached := map[*types.Func]bool{start: true}
	queue := []*types.Func{start}
	files := map[string]bool{}
	for len(queue) > 0 {
		fn := queue[0]
		queue = queue[1:]
		d, ok := decls[fn]
		if !ok {
			continue
		}
		files[d.file] = true
		if inEngine(fn.Pkg().Path()) {
			continue
		}
		ast.Inspect(d.body, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			used, ok := d.info.Uses[id].(*types.Func)
			if !ok || used.Pkg() == nil || !strings.HasPrefix(used.Pkg().Path(), module) {
				return true
			}
			for _, next := range append(implementations(used.Origin()), used.Origin()) {
				if !reached[next] {
					reached[next] = true
					queue = append(queue, next)
				}
			}
			return true
		})
	}
	return slices.Sorted(maps.Keys(files))
}

func inEngine(path string) bool { return slices.Contains(engines, strings.TrimPrefix(path, module)) }

// lookupEntry finds "Func" or "Type.Method" in pkg.
func lookupEntry(t *testing.T, pkg *types.Package, entry string) *types.Func {
	t.Helper()
	if pkg == nil {
		t.Fatalf("package of %s not type-checked", entry)
	}
	typeName, method, isMethod := strings.Cut(entry, ".")
	obj := pkg.Scope().Lookup(typeName)
	if isMethod && obj != nil {
		obj, _, _ = types.LookupFieldOrMethod(types.NewPointer(obj.Type()), true, pkg, method)
	}
	fn, ok := obj.(*types.Func)
	if !ok {
		t.Fatalf("%s.%s is not a function", pkg.Path(), entry)
	}
	return fn
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
