package policy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestResult is the outcome of one Rego test rule.
type TestResult struct {
	Name     string // package.rule
	Location string // file:line
	Passed   bool
	Detail   string // failure or error text
}

// ErrNoTests means a test run found no test rule: a suite that tests nothing must not pass.
var ErrNoTests = errors.New("no Rego tests found (test rules are named test_*)")

// RunRegoTests runs every test_* rule in testModules with OPA's own test runner, against the
// policies in modules (compiled together) and params as data.daemonguard.parameters — the same
// data the engine serves with. It is what `go test ./policies/...` and `daemonguard policy test`
// both run, in the same sandbox.
func RunRegoTests(ctx context.Context, modules, testModules []Module, params map[string]any) ([]TestResult, error) {
	parsed := map[string]*ast.Module{}
	for _, m := range append(append([]Module(nil), modules...), testModules...) {
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", m.Name, err)
		}
		parsed[m.Name] = mod
	}
	if params == nil {
		params = map[string]any{}
	}
	store := inmem.NewFromObject(map[string]any{"daemonguard": map[string]any{"parameters": params}})
	ch, err := tester.NewRunner().
		SetDefaultRegoVersion(ast.RegoV1).
		SetCompiler(newCompiler()).
		SetStore(store).
		RaiseBuiltinErrors(true).
		Run(ctx, parsed)
	if errs, ok := err.(ast.Errors); ok {
		err = sandboxErrors(errs)
	}
	if err != nil {
		return nil, fmt.Errorf("run Rego tests: %w", err)
	}
	var results []TestResult
	for r := range ch {
		tr := TestResult{Name: strings.TrimPrefix(r.Package, "data.") + "." + r.Name, Passed: r.Pass()}
		if r.Location != nil {
			tr.Location = fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row)
		}
		switch {
		case r.Error != nil:
			tr.Detail = r.Error.Error()
		case r.Fail:
			tr.Detail = "test rule was false or undefined"
			if r.FailedAt != nil {
				tr.Detail += " at " + r.FailedAt.String()
			}
		}
		results = append(results, tr)
	}
	sort.Slice(results, func(i, j int) bool { return results[i].Name < results[j].Name })
	if len(results) == 0 {
		return nil, ErrNoTests
	}
	return results, nil
}

// SplitTests separates *_test.rego modules from policy modules.
func SplitTests(all []Module) (modules, tests []Module) {
	for _, m := range all {
		if strings.HasSuffix(m.Name, "_test.rego") {
			tests = append(tests, m)
		} else {
			modules = append(modules, m)
		}
	}
	return modules, tests
}
