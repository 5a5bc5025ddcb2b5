package policy

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/policies"
)

// Builtin returns the embedded policies (tests excluded) and default parameters.
func Builtin() ([]Module, map[string]any, error) {
	all, params, err := LoadFS(policies.Files, ".")
	modules, _ := SplitTests(all)
	return modules, params, err
}

// CompileBuiltin is the built-in policy set with its default parameters, as a webhook without
// policy ConfigMaps serves it.
func CompileBuiltin(ctx context.Context) (*Set, error) {
	modules, params, err := Builtin()
	if err != nil {
		return nil, err
	}
	return Compile(ctx, modules, params)
}

// BuiltinWithTests returns the embedded policies, their tests and the default parameters.
func BuiltinWithTests() (modules, tests []Module, params map[string]any, err error) {
	all, params, err := LoadFS(policies.Files, ".")
	modules, tests = SplitTests(all)
	return modules, tests, params, err
}

// LoadFS reads every .rego file below dir of fsys (tests included; see SplitTests), and merges
// every parameters.yaml found, as a policy set's inputs.
func LoadFS(fsys fs.FS, dir string) ([]Module, map[string]any, error) {
	var modules []Module
	params := map[string]any{}
	err := fs.WalkDir(fsys, dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case strings.HasSuffix(p, ".rego"):
			data, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			modules = append(modules, Module{Name: p, Source: string(data)})
		case path.Base(p) == "parameters.yaml":
			data, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			var more map[string]any
			if err := yaml.Unmarshal(data, &more); err != nil {
				return fmt.Errorf("parse %s: %w", p, err)
			}
			params = MergeParameters(params, more)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("load policies: %w", err)
	}
	return modules, params, nil
}

// MergeParameters deep-merges override into base: objects merge key by key, anything else
// (lists included) is replaced. Neither argument is modified.
func MergeParameters(base, override map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(override))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range override {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = MergeParameters(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// CompileDirs compiles the built-in policies, overlaid with the .rego files and parameters.yaml
// found in dirs (same replacement rules as ConfigMaps: a module with a built-in's package replaces it).
func CompileDirs(ctx context.Context, dirs []string) (*Set, error) {
	modules, params, err := FromDirs(dirs)
	if err != nil {
		return nil, err
	}
	return Compile(ctx, modules, params)
}

// OverBuiltin overlays sources on the built-in policies and parameters (Overlay): the policies
// and parameters FromDirs reads and the webhook's reloader compiles.
func OverBuiltin(sources []Source) ([]Module, map[string]any, error) {
	builtin, params, err := Builtin()
	if err != nil {
		return nil, nil, err
	}
	return Overlay(builtin, params, sources)
}

// FromDirs returns the modules and parameters CompileDirs compiles.
func FromDirs(dirs []string) ([]Module, map[string]any, error) {
	var sources []Source
	for _, dir := range dirs {
		src := Source{Name: dir, Files: map[string]string{}}
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if strings.HasSuffix(path, ".rego") || filepath.Base(path) == "parameters.yaml" {
				data, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				rel, _ := filepath.Rel(dir, path)
				src.Files[rel] = string(data)
			}
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("read policies from %s: %w", dir, err)
		}
		sources = append(sources, src)
	}
	return OverBuiltin(sources)
}
