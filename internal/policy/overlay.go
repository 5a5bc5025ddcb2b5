package policy

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"sigs.k8s.io/yaml"
)

// Source is a set of extra policy files, such as one ConfigMap's data: keys ending in .rego are
// modules, a key parameters.yaml is merged into the parameters, other keys are ignored.
type Source struct {
	Name  string // e.g. configmap/daemonguard/extra-policies
	Files map[string]string
}

// blameSources adds to a compile error that names no file of the sources the files of each
// source that fails alone over base. Such an error is located in a built-in (a source replaced a
// package the built-ins use, or added a rule that conflicts with theirs) or nowhere (an
// enforcement action that is none, from a rule or parameters.yaml); naming the source lets the
// reloader blame its ConfigMap and no other. It costs a compile per source, on errors only.
func (l Limits) blameSources(ctx context.Context, err error, base []Module, baseParams map[string]any, sources []Source) error {
	for _, src := range sources {
		if strings.Contains(err.Error(), src.Name+"/") {
			return err
		}
	}
	var blamed []string
	for _, src := range sources {
		modules, params, oerr := Overlay(base, baseParams, []Source{src})
		if oerr == nil {
			_, oerr = l.Compile(ctx, modules, params)
		}
		if oerr != nil {
			blamed = append(blamed, sourceFiles(src)...)
		}
	}
	if len(blamed) == 0 {
		return err
	}
	sort.Strings(blamed)
	return fmt.Errorf("%w\nthe built-ins fail with these files alone: %s", err, strings.Join(blamed, ", "))
}

// sourceFiles names the files of src that Overlay reads, as its errors do (SOURCE/KEY).
func sourceFiles(src Source) []string {
	var files []string
	for key := range src.Files {
		if strings.HasSuffix(key, ".rego") && !strings.HasSuffix(key, "_test.rego") || path.Base(key) == "parameters.yaml" {
			files = append(files, src.Name+"/"+key)
		}
	}
	return files
}

// Overlay puts sources over the built-in modules and parameters. A source module whose package
// equals a built-in's replaces every built-in module of that package (so a policy can be rewritten
// from git); any other module is added. Sources are applied in name order, so the result does not
// depend on list order. Errors name the source and key.
func Overlay(base []Module, baseParams map[string]any, sources []Source) ([]Module, map[string]any, error) {
	sorted := append([]Source(nil), sources...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })

	params := baseParams
	var extra []Module
	replaced := map[string]bool{}
	for _, src := range sorted {
		keys := make([]string, 0, len(src.Files))
		for k := range src.Files {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			name := src.Name + "/" + key
			switch {
			case strings.HasSuffix(key, "_test.rego"):
				// Tests travel with policies in git but are run by `daemonguard policy test`, not served.
			case strings.HasSuffix(key, ".rego"):
				mod, err := ast.ParseModuleWithOpts(name, src.Files[key], ast.ParserOptions{RegoVersion: ast.RegoV1})
				if err != nil {
					return nil, nil, fmt.Errorf("parse %s: %w", name, err)
				}
				replaced[mod.Package.Path.String()] = true
				extra = append(extra, Module{Name: name, Source: src.Files[key]})
			case path.Base(key) == "parameters.yaml":
				var more map[string]any
				if err := yaml.Unmarshal([]byte(src.Files[key]), &more); err != nil {
					return nil, nil, fmt.Errorf("parse %s: %w", name, err)
				}
				params = MergeParameters(params, more)
			}
		}
	}
	var modules []Module
	for _, m := range base {
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, nil, fmt.Errorf("parse %s: %w", m.Name, err)
		}
		if !replaced[mod.Package.Path.String()] {
			modules = append(modules, m)
		}
	}
	return append(modules, extra...), params, nil
}
