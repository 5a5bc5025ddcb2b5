package policy

import (
	"fmt"
	"io/fs"
	"path"
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
