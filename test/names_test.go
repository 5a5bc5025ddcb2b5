package test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// recurringNames are the only exported names that several product packages may each declare,
// with the one kind of declaration each may be. Each means "this package's own ...", so it is
// always read with the package's name in front and never means two things to a reader.
var recurringNames = map[string]struct {
	kind string // "type" or "func": what every declaration of the name must be
	why  string
}{
	"Options": {"type", "the settings of the package's own component, filled from its flags (serving.Options, selftls.Options)"},
	"New":     {"func", "the constructor of the package's one main value (cli.New is the command tree, promquery.New the client)"},
	"Run":     {"func", "runs the package's one job: a component until its context ends (webhookserver.Run, rollout.Run), or the audit once (audit.Run)"},
	"Read":    {"func", "reads the one input the package is about (manifest.Read the documents, kubesupport.Read the server)"},
}

// exportedDecl is one exported top-level declaration of a product package.
type exportedDecl struct {
	pkg  string // the package's directory, relative to the module's root
	kind string // type, func, const or var
	pos  string // file:line, relative to the module's root
}

// TestExportedNamesMeanOneThing holds "every exported name has one meaning across packages": it
// parses every product package (the module's packages outside test/ and tools/, main packages,
// testdata and _test.go files aside) and fails when two of them export a top-level type,
// function, constant or variable of the same name, a name of one kind in one package and of
// another kind in another included. Methods and fields are not compared: they are read through
// their type. rolloutapi.Status the annotations' codec beside rolloutcli.Status the printed
// view, or two Verdicts, two Plans, two Truncates, are what it catches: a reader who learnt the
// name in one package would misread it in the other.
//
// The exceptions are recurringNames, each with its reason; an exception that no longer recurs
// fails too, so the list stays as short as the code allows. Names of the same meaning in two
// packages are also a failure: one of them should call the other, under another name, or go.
func TestExportedNamesMeanOneThing(t *testing.T) {
	byName := productExports(t)
	if len(byName) < 100 {
		t.Fatalf("found %d exported names in the product packages; the walk missed them", len(byName))
	}
	for name, decls := range byName {
		var pkgs []string
		for _, d := range decls {
			if !slices.Contains(pkgs, d.pkg) {
				pkgs = append(pkgs, d.pkg)
			}
		}
		if len(pkgs) < 2 {
			continue
		}
		if r, ok := recurringNames[name]; ok && !slices.ContainsFunc(decls, func(d exportedDecl) bool { return d.kind != r.kind }) {
			continue
		}
		var where []string
		for _, d := range decls {
			where = append(where, fmt.Sprintf("%s %s (%s)", d.kind, d.pkg, d.pos))
		}
		slices.Sort(where)
		t.Errorf("%s is exported by %d product packages: %s; give each the name of its own job", name, len(pkgs), strings.Join(where, ", "))
	}
	for name := range recurringNames {
		pkgs := map[string]bool{}
		for _, d := range byName[name] {
			pkgs[d.pkg] = true
		}
		if len(pkgs) < 2 {
			t.Errorf("recurringNames lists %s, which %d product package exports now; drop it from the list", name, len(pkgs))
		}
	}
}

// productExports maps each exported top-level name of the product packages to its declarations.
// A file counts when it builds for this platform with the default tags, as go build sees it.
func productExports(t *testing.T) map[string][]exportedDecl {
	t.Helper()
	byName := map[string][]exportedDecl{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (rel == "test" || rel == "tools" || name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if ok, err := build.Default.MatchFile(filepath.Dir(path), d.Name()); err != nil || !ok {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil // a command's names are seen by no other package
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		add := func(id *ast.Ident, kind string) {
			if !id.IsExported() {
				return
			}
			p := fset.Position(id.Pos())
			rel, _ := filepath.Rel(repoRoot, p.Filename)
			byName[id.Name] = append(byName[id.Name], exportedDecl{pkg: pkg, kind: kind, pos: fmt.Sprintf("%s:%d", filepath.ToSlash(rel), p.Line)})
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					add(decl.Name, "func")
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						add(spec.Name, "type")
					case *ast.ValueSpec:
						for _, id := range spec.Names {
							add(id, decl.Tok.String())
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byName
}
