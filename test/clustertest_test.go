package test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestClusterTestsUseClustertest holds the cluster tests to one helper package: what every test on
// the local control plane does is written once, in test/clustertest, and no cluster test writes it
// again. It parses
// every *_cluster_test.go outside test/clustertest (go/parser; no cluster, no type check) and
// fails, naming file and line, where a file
//
//   - runs kubectl itself: exec.Command or exec.CommandContext with the string literal "kubectl"
//     (clustertest.Kubectl, TryKubectl, KubectlAs; localcluster's Cluster.Kubectl);
//   - declares its own kubectl wrapper: a function or method whose name contains "kubectl" (a
//     Test or Benchmark aside);
//   - fails the test when kubectl fails, by hand: an if statement that calls Fatal or Fatalf and
//     either calls Cluster.Kubectl in its init or tests err != nil right after a statement that
//     calls it (clustertest.Kubectl);
//   - names the seed manifest, a string literal ending in nginx-ds.yaml (clustertest.SeedManifest,
//     SeedObject, SeedYAML);
//   - builds its own seed DaemonSet: a composite literal with the field Name: "nginx-ds"
//     (clustertest.SeedObject);
//   - reads a pod's Ready condition itself: a comparison == with corev1.PodReady
//     (clustertest.PodReady);
//   - polls a DaemonSet until a condition: a function literal passed to a call named WaitFor
//     (any case) or Poll* whose only read of the API (calls whose name starts with Get or List,
//     any case: a local listPods counts) is a Get on DaemonSets(...) (clustertest.WaitDaemonSet,
//     or PollDaemonSet for a benchmark that times the wait; RolledOut is the common condition).
//
// Loops that watch a DaemonSet for a fixed time (that it stays so) and waits that read the
// DaemonSet together with pods or Events are not such polls and pass.
func TestClusterTestsUseClustertest(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	fset := token.NewFileSet()
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "tools" || strings.HasPrefix(name, ".") || rel == "test/clustertest") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_cluster_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, p := range clusterHelperCopies(f) {
			problems = append(problems, fmt.Sprintf("%s:%d: %s", rel, fset.Position(p.pos).Line, p.what))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 40 {
		t.Fatalf("found %d cluster test files, want the tree's ~50: the walk is broken", files)
	}
	if len(problems) > 0 {
		t.Errorf("cluster tests repeat what test/clustertest holds:\n%s", strings.Join(problems, "\n"))
	}
}

type clusterHelperCopy struct {
	pos  token.Pos
	what string
}

// clusterHelperCopies lists the places in f that TestClusterTestsUseClustertest refuses.
func clusterHelperCopies(f *ast.File) []clusterHelperCopy {
	var out []clusterHelperCopy
	add := func(n ast.Node, what string) { out = append(out, clusterHelperCopy{n.Pos(), what}) }
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if name := n.Name.Name; strings.Contains(strings.ToLower(name), "kubectl") && !strings.HasPrefix(name, "Test") && !strings.HasPrefix(name, "Benchmark") {
				add(n, "declares its own kubectl wrapper "+n.Name.Name+": use clustertest.Kubectl, TryKubectl or KubectlAs")
			}
		case *ast.CallExpr:
			if pkg, name := selectorName(n.Fun); pkg == "exec" && (name == "Command" || name == "CommandContext") {
				if slices.ContainsFunc(n.Args, func(a ast.Expr) bool { return stringLit(a) == "kubectl" }) {
					add(n, "runs kubectl itself: use clustertest.Kubectl, TryKubectl or KubectlAs")
				}
			}
			if _, name := selectorName(n.Fun); strings.EqualFold(name, "WaitFor") || strings.HasPrefix(name, "Poll") {
				for _, a := range n.Args {
					if lit, ok := a.(*ast.FuncLit); ok && onlyReadsADaemonSet(lit) {
						add(lit, "polls a DaemonSet until a condition: use clustertest.WaitDaemonSet")
					}
				}
			}
		case *ast.BinaryExpr:
			if n.Op == token.EQL && (isPodReady(n.X) || isPodReady(n.Y)) {
				add(n, "reads a pod's Ready condition itself: use clustertest.PodReady")
			}
		case *ast.BasicLit:
			if strings.HasSuffix(stringLit(n), "nginx-ds.yaml") {
				add(n, "names the seed manifest: use clustertest.SeedManifest, SeedObject or SeedYAML")
			}
		case *ast.KeyValueExpr:
			if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Name" && stringLit(n.Value) == "nginx-ds" {
				add(n, "builds its own seed DaemonSet: use clustertest.SeedObject")
			}
		case *ast.BlockStmt:
			for i, s := range n.List {
				ifs, ok := s.(*ast.IfStmt)
				if !ok || !callsFatal(ifs.Body) {
					continue
				}
				if ifs.Init != nil && callsClusterKubectl(ifs.Init) || i > 0 && callsClusterKubectl(n.List[i-1]) && testsErr(ifs.Cond) {
					add(ifs, "fails the test when kubectl fails: use clustertest.Kubectl")
				}
			}
		}
		return true
	})
	return out
}

// isPodReady is the expression corev1.PodReady.
func isPodReady(e ast.Expr) bool {
	pkg, name := selectorName(e)
	_, ok := e.(*ast.SelectorExpr)
	return ok && pkg == "corev1" && name == "PodReady"
}

// selectorName splits x.Name into x (when x is an identifier) and Name.
func selectorName(e ast.Expr) (pkg, name string) {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		if id, ok := e.(*ast.Ident); ok {
			return "", id.Name
		}
		return "", ""
	}
	if id, ok := sel.X.(*ast.Ident); ok {
		pkg = id.Name
	}
	return pkg, sel.Sel.Name
}

// onlyReadsADaemonSet is a function literal whose one API read (a call of a method or function
// whose name starts with Get or List, any case) is DaemonSets(...).Get.
func onlyReadsADaemonSet(lit *ast.FuncLit) bool {
	reads, daemonSetGets := 0, 0
	ast.Inspect(lit.Body, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		_, name := selectorName(call.Fun)
		if lower := strings.ToLower(name); !strings.HasPrefix(lower, "get") && !strings.HasPrefix(lower, "list") {
			return true
		}
		reads++
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok && name == "Get" {
			if inner, ok := sel.X.(*ast.CallExpr); ok {
				if _, name := selectorName(inner.Fun); name == "DaemonSets" {
					daemonSetGets++
				}
			}
		}
		return true
	})
	return reads == 1 && daemonSetGets == 1
}

// callsClusterKubectl is a statement that calls a Kubectl method of something other than the
// clustertest package (Cluster.Kubectl, which returns kubectl's error).
func callsClusterKubectl(s ast.Stmt) bool {
	found := false
	ast.Inspect(s, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if pkg, name := selectorName(call.Fun); name == "Kubectl" && pkg != "clustertest" {
				found = true
			}
		}
		return !found
	})
	return found
}

// callsFatal is a block that calls Fatal or Fatalf.
func callsFatal(b *ast.BlockStmt) bool {
	found := false
	ast.Inspect(b, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if _, name := selectorName(call.Fun); name == "Fatal" || name == "Fatalf" {
				found = true
			}
		}
		return !found
	})
	return found
}

// testsErr is the condition err != nil.
func testsErr(e ast.Expr) bool {
	b, ok := e.(*ast.BinaryExpr)
	if !ok || b.Op != token.NEQ {
		return false
	}
	x, ok := b.X.(*ast.Ident)
	y, ok2 := b.Y.(*ast.Ident)
	return ok && ok2 && x.Name == "err" && y.Name == "nil"
}
