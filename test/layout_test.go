// Package test holds daemonguard's test bench apart from the product: the local control plane
// (localcluster), the harness that runs daemonguard's components against it, the helpers every
// test on it shares (clustertest: kubectl, the seed DaemonSet, the budget sampler), the webhook
// registration and readiness probes they share (webhookreg), the demo, the admission load
// generator (loadgen), the API server benchmark (apibench), the 1,000-node rollout benchmark
// (rolloutbench), the benchmark of `rollout plan` (planbench), the 5,000-node scale benchmark
// (scalebench) and the real Prometheus for tests (promtest). layout_test.go checks that the
// shipped binaries link none of it, that `rollout plan` links no controller manager, that the
// rollout's layers import only downward (TestArrowsPointDown), and how many files a plan run and a
// reconcile cross; naming_test.go that every test file needing the local control plane, and only
// those, is named *_cluster_test.go; docs_test.go that the docs name only what exists.
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
// wires it into a manager, nor controller-runtime's manager.
func TestPlanLinksNoControllerManager(t *testing.T) {
	for _, pkg := range []string{"/internal/preflight", "/internal/rolloutcli"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, errText(err))
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == module+"/controller/rollout" || dep == "sigs.k8s.io/controller-runtime/pkg/manager" {
				t.Errorf("%s links %s", module+pkg, dep)
			}
		}
	}
}

// TestArrowsPointDown holds the rollout's layers apart: controller/rollout -> the planner
// (controller/rolloutplan) -> the analysis gates' vocabulary (controller/rolloutanalysis) <- the
// Prometheus client (internal/promquery). The client links nothing of the planner or the
// controller, and the planner and the vocabulary link no Kubernetes or Prometheus client: they
// take plain data and a clock.
func TestArrowsPointDown(t *testing.T) {
	// clients are import path prefixes of the clients the pure layers must not link.
	clients := []string{"k8s.io/client-go/", "sigs.k8s.io/controller-runtime/", "github.com/prometheus/client_golang/"}
	controller, planner, client := module+"/controller/rollout", module+"/controller/rolloutplan", module+"/internal/promquery"
	for pkg, forbidden := range map[string][]string{
		"/internal/promquery":         {planner, controller},
		"/controller/rolloutanalysis": append([]string{planner, controller, client}, clients...),
		"/controller/rolloutplan":     append([]string{controller, client}, clients...),
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

// vocabulary are the module packages every component reads as a dictionary, not as a step of a
// run: the rollout annotations and status codec, the DaemonSet controller's node rules, the
// manifest reader and the text helpers. A run's files below leave them out.
var vocabulary = []string{"/internal/rolloutapi", "/internal/nodes", "/internal/manifest", "/internal/kubetext"}

// engines are the module packages a run calls as a library with its own documentation and tests:
// the policy engine. A run's files count the engine's entry files, those declaring what the run
// calls, not the engine's insides (compiling, sandboxing and evaluating Rego).
var engines = []string{"/internal/policy"}

// TestRunsCrossFewFiles counts the files one run of a job crosses, so a reader follows it through
// a handful of rooms, and fails when the job spreads again. A file counts when the run can execute
// a function or method declared in it: from the entry, every function of the module that a
// reached body names (called or passed on; an interface method stands for every implementation in
// the module) is reached in turn. Functions of the vocabulary packages are not followed or
// counted, those of the engines counted and not followed. It reads the source and the compiler's
// export data, no cluster.
func TestRunsCrossFewFiles(t *testing.T) {
	for name, tc := range map[string]struct {
		pkg, entry        string // the entry: a function, or Type.Method
		maxFiles, maxPkgs int
		forbidden         []string // packages the run must not enter
	}{
		// A `rollout plan` run at most 21 files in at most 7 packages: the admission core with its
		// bounds (annotation sizes, the gate scope), the one PromQL scope (internal/promscope)
		// that the controller and admission share, the controller's planner in its three rooms
		// (state, plan, plan_analysis) with the forecast, and the analysis gates' judgement
		// (controller/rolloutanalysis) that the planner and the Prometheus client share.
		"rollout plan": {pkg: "/internal/preflight", entry: "NewPlanCommand", maxFiles: 21, maxPkgs: 7,
			forbidden: []string{"/controller/rollout", "/internal/cli"}},
		// A validating review at most 8 files in 4 packages, from the HTTP handler to the policy
		// engine's entry: each side's bounds in a file of its own (webhook/bounds.go, the request's
		// deadline, concurrency and heap; internal/admission/bounds.go, sizes checked before any
		// policy; gates.go, the gate scope, with internal/promscope's parser).
		"a validating review": {pkg: "/webhook", entry: "DaemonSetValidator.Handle", maxFiles: 8, maxPkgs: 4},
		// A reconcile at most 11 files in 6 packages, manager.go (the Store over the informers)
		// included, plus the Prometheus client (internal/promquery) that measures a due analysis
		// gate, the PromQL scope (internal/promscope) it applies, and the namespace mark
		// (internal/admission's one definition): libraries with their own tests, in the gather step;
		// and in the decide step the planner's three rooms (controller/rolloutplan's state.go,
		// plan.go, plan_analysis.go) with the analysis gates' judgement (controller/rolloutanalysis).
		"a reconcile": {pkg: "/controller/rollout", entry: "Reconciler.Reconcile", maxFiles: 11, maxPkgs: 6},
	} {
		t.Run(name, func(t *testing.T) {
			files := crossedFiles(t, module+tc.pkg, tc.entry)
			pkgs := map[string]bool{}
			for _, f := range files {
				pkgs[filepath.Dir(f)] = true
			}
			t.Logf("%d files in %d packages: %s", len(files), len(pkgs), strings.Join(files, " "))
			if len(files) > tc.maxFiles || len(pkgs) > tc.maxPkgs {
				t.Errorf("%s crosses %d files in %d packages, want at most %d in %d", name, len(files), len(pkgs), tc.maxFiles, tc.maxPkgs)
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
// entry in pkg can execute, vocabulary left out.
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
		if inVocabulary(fn.Pkg().Path()) {
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

func inVocabulary(path string) bool {
	return slices.Contains(vocabulary, strings.TrimPrefix(path, module))
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
