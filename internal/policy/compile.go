package policy

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
)

// Set is one compiled policy set. It is immutable and safe for concurrent use.
type Set struct {
	validate    rego.PreparedEvalQuery
	inject      rego.PreparedEvalQuery
	hasInject   bool
	enforcement map[string]Action
	modules     []string
	policies    []string
}

const (
	// validateQuery asks every policy below data.daemonguard.policies for its violations.
	validateQuery = "violations = {name: v | v := data.daemonguard.policies[name].violation}"
	injectQuery   = "decision = data.daemonguard.inject.decision"
	injectPackage = "data.daemonguard.inject"
)

// policyNames lists the policies of a module set: the first package name below
// daemonguard.policies of every module there.
func policyNames(parsed map[string]*ast.Module) map[string]bool {
	names := map[string]bool{}
	for _, mod := range parsed {
		ref := mod.Package.Path
		if len(ref) < 4 || !ref[1].Equal(ast.StringTerm("daemonguard")) || !ref[2].Equal(ast.StringTerm("policies")) {
			continue
		}
		if name, ok := ref[3].Value.(ast.String); ok {
			names[string(name)] = true
		}
	}
	return names
}

// Compile parses and compiles modules (Rego v1) with params as data.daemonguard.parameters and
// prepares the queries, so that no request pays for parsing, compiling or planning. Errors name
// the module and line.
func Compile(ctx context.Context, modules []Module, params map[string]any) (*Set, error) {
	parsed := make(map[string]*ast.Module, len(modules))
	var errs []error
	for _, m := range modules {
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		parsed[m.Name] = mod
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("parse policies: %w", errors.Join(errs...))
	}
	compiler := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithStrict(true)
	compiler.Compile(parsed)
	if compiler.Failed() {
		return nil, fmt.Errorf("compile policies: %w", compiler.Errors)
	}
	if params == nil {
		params = map[string]any{}
	}
	// Parameters are read on every evaluation; storing them as AST values converts them once per
	// policy set instead of on every read.
	store := inmem.NewFromObjectWithOpts(map[string]any{"daemonguard": map[string]any{"parameters": params}}, inmem.OptReturnASTValuesOnRead(true))

	s := &Set{enforcement: map[string]Action{}}
	for _, m := range modules {
		s.modules = append(s.modules, m.Name)
	}
	sort.Strings(s.modules)
	for name := range policyNames(parsed) {
		s.policies = append(s.policies, name)
	}
	sort.Strings(s.policies)
	prepare := func(q string) (rego.PreparedEvalQuery, error) {
		return rego.New(rego.Query(q), rego.Compiler(compiler), rego.Store(store), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
	}
	var err error
	if s.validate, err = prepare(validateQuery); err != nil {
		return nil, fmt.Errorf("prepare validation query: %w", err)
	}
	for _, mod := range parsed {
		if mod.Package.Path.String() == injectPackage {
			s.hasInject = true
		}
	}
	if s.hasInject {
		if s.inject, err = prepare(injectQuery); err != nil {
			return nil, fmt.Errorf("prepare inject query: %w", err)
		}
	}
	if err := s.resolveEnforcement(ctx, compiler, store, params); err != nil {
		return nil, err
	}
	return s, nil
}

// resolveEnforcement evaluates each policy's constant `enforcement` rule once per set and applies
// the overrides from parameters.enforcement, so no request pays for it.
func (s *Set) resolveEnforcement(ctx context.Context, compiler *ast.Compiler, store storage.Store, params map[string]any) error {
	rs, err := rego.New(
		rego.Query("e = {name: a | some name; a := data.daemonguard.policies[name].enforcement}"),
		rego.Compiler(compiler), rego.Store(store), rego.StrictBuiltinErrors(true),
	).Eval(ctx)
	if err != nil {
		return fmt.Errorf("evaluate enforcement rules: %w", err)
	}
	if len(rs) == 1 {
		declared, _ := rs[0].Bindings["e"].(map[string]any)
		for name, a := range declared {
			str, _ := a.(string)
			action, err := parseAction(str)
			if err != nil {
				return fmt.Errorf("policy %s: %w", name, err)
			}
			s.enforcement[name] = action
		}
	}
	overrides, _ := params["enforcement"].(map[string]any)
	for name, a := range overrides {
		str, _ := a.(string)
		action, err := parseAction(str)
		if err != nil {
			return fmt.Errorf("parameters.enforcement.%s: %w", name, err)
		}
		s.enforcement[name] = action
	}
	return nil
}

// Modules lists the names of the modules compiled into the set.
func (s *Set) Modules() []string { return s.modules }

// Policies lists the validation policies of the set (the packages below daemonguard.policies),
// sorted; the audit reports a pass for each one an object does not violate. Rules written in
// daemonguard.policies itself or above it can make up further policies, seen only when violated.
func (s *Set) Policies() []string { return s.policies }

// HasInject reports whether the set has an inject policy.
func (s *Set) HasInject() bool { return s.hasInject }
