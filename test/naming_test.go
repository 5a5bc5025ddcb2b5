package test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// localclusterNames are the names of package localcluster that only a test on the control plane
// uses: the functions that start a cluster or say that a test needs one, and the cluster's type.
var localclusterNames = map[string]bool{"RunTests": true, "Start": true, "NeedCluster": true, "NeedRealNode": true, "Cluster": true}

// TestClusterTestsAreNamedSo holds the naming rule of the tests: a test file that needs the local
// control plane is named *_cluster_test.go, and no other file is, so that a reader tells the slow
// tests from the fast ones by name.
//
// The criterion is syntactic, and cheap. A declaration of a test package needs the control plane
// when it names localcluster.RunTests, Start, NeedCluster, NeedRealNode or Cluster; or
// `cluster`, the shared cluster of a package whose tests declare `var cluster
// *localcluster.Cluster` (the one RunTests fills); or a function or type of its package that
// needs it (a helper that starts a webhook on the cluster, a type that holds one). A file needs
// the control plane when one of its declarations does. The declaration of the shared cluster
// itself needs it (it names localcluster.Cluster), so TestMain and its var live in a
// *_cluster_test.go file.
func TestClusterTestsAreNamedSo(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	packages := map[string]*testPackage{} // folder and package name -> its test files
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || name == "tools" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		key := filepath.Dir(path) + " " + f.Name.Name // package p and p_test share a folder
		pkg := packages[key]
		if pkg == nil {
			pkg = &testPackage{files: map[string]*ast.File{}}
			packages[key] = pkg
		}
		pkg.files[path] = f
		pkg.sharedCluster = pkg.sharedCluster || declaresSharedCluster(f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) < 30 {
		t.Fatalf("found test files in %d folders under %s; the walk went wrong", len(packages), root)
	}
	for _, pkg := range packages {
		needs := pkg.clusterNames()
		for path, f := range pkg.files {
			rel, _ := filepath.Rel(root, path)
			why := pkg.needsCluster(f, needs)
			named := strings.HasSuffix(path, "_cluster_test.go")
			switch {
			case why != "" && !named:
				t.Errorf("%s needs the local control plane (%s): name it *_cluster_test.go", rel, why)
			case why == "" && named:
				t.Errorf("%s is named *_cluster_test.go but needs no local control plane", rel)
			}
		}
	}
}

// testPackage is the test files of one package.
type testPackage struct {
	files         map[string]*ast.File // path -> syntax
	sharedCluster bool                 // they declare var cluster *localcluster.Cluster
}

// clusterNames returns the names of the package's top-level functions and types that need the
// control plane (a helper that starts a webhook on the cluster, a type holding a cluster).
func (p *testPackage) clusterNames() map[string]bool {
	needs := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for _, f := range p.files {
			for _, decl := range f.Decls {
				for _, name := range topLevelNames(decl) {
					if !needs[name] && p.useDecl(decl, needs) != "" {
						needs[name], changed = true, true
					}
				}
			}
		}
	}
	return needs
}

// topLevelNames are the functions and types decl declares; methods are reached through their
// receiver's type.
func topLevelNames(decl ast.Decl) []string {
	var names []string
	switch decl := decl.(type) {
	case *ast.FuncDecl:
		if decl.Recv == nil {
			names = append(names, decl.Name.Name)
		}
	case *ast.GenDecl:
		for _, spec := range decl.Specs {
			if ts, ok := spec.(*ast.TypeSpec); ok {
				names = append(names, ts.Name.Name)
			}
		}
	}
	return names
}

// needsCluster says why f needs the control plane, or "" when it does not.
func (p *testPackage) needsCluster(f *ast.File, needs map[string]bool) string {
	for _, decl := range f.Decls {
		if why := p.useDecl(decl, needs); why != "" {
			return why
		}
	}
	return ""
}

// useDecl is use on a declaration, but for the names it declares.
func (p *testPackage) useDecl(decl ast.Decl, needs map[string]bool) string {
	switch decl := decl.(type) {
	case *ast.FuncDecl:
		why := p.use(decl.Type, needs)
		if why == "" && decl.Recv != nil {
			why = p.use(decl.Recv, needs)
		}
		if why == "" && decl.Body != nil {
			why = p.use(decl.Body, needs)
		}
		return why
	case *ast.GenDecl:
		for _, spec := range decl.Specs {
			var n ast.Node = spec
			if ts, ok := spec.(*ast.TypeSpec); ok {
				n = ts.Type
			}
			if why := p.use(n, needs); why != "" {
				return why
			}
		}
	}
	return ""
}

// use says how n uses the control plane: the first name that does, or "".
func (p *testPackage) use(n ast.Node, needs map[string]bool) string {
	var why string
	ast.Inspect(n, func(n ast.Node) bool {
		if why != "" {
			return false
		}
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if isIdent(n.X, "localcluster") && localclusterNames[n.Sel.Name] {
				why = "localcluster." + n.Sel.Name
			} else {
				why = p.use(n.X, needs) // a selector's Sel (c.cluster, x.Start) names no package thing
			}
			return false
		case *ast.Ident:
			if n.Name == "cluster" && p.sharedCluster {
				why = "the shared cluster"
			} else if needs[n.Name] {
				why = n.Name
			}
		}
		return why == ""
	})
	return why
}

// declaresSharedCluster reports whether f declares the package variable cluster of type
// *localcluster.Cluster.
func declaresSharedCluster(f *ast.File) bool {
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.VAR {
			continue
		}
		for _, spec := range gen.Specs {
			v := spec.(*ast.ValueSpec)
			if !isClusterPointer(v.Type) {
				continue
			}
			for _, name := range v.Names {
				if name.Name == "cluster" {
					return true
				}
			}
		}
	}
	return false
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// isClusterPointer reports whether e is the type *localcluster.Cluster.
func isClusterPointer(e ast.Expr) bool {
	star, ok := e.(*ast.StarExpr)
	if !ok {
		return false
	}
	sel, ok := star.X.(*ast.SelectorExpr)
	return ok && isIdent(sel.X, "localcluster") && sel.Sel.Name == "Cluster"
}
