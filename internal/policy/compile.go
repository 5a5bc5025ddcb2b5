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
	compiler    *ast.Compiler
	store       storage.Store
	violations  rego.PreparedEvalQuery
	decision    rego.PreparedEvalQuery
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

// Compile is DefaultLimits.Compile.
func Compile(ctx context.Context, modules []Module, params map[string]any) (*Set, error) {
	return DefaultLimits.Compile(ctx, modules, params)
}

// Compile parses and compiles modules (Rego v1, in the sandbox) with params as
// data.daemonguard.parameters, prepares the queries, so that no request pays for parsing,
// compiling or planning, and evaluates the set once on the trial DaemonSets (trial.go), all within
// l. Errors name the module and line; a set that exceeds l gets a *LimitError.
func (l Limits) Compile(ctx context.Context, modules []Module, params map[string]any) (*Set, error) {
	return bounded(ctx, l, func(ctx context.Context, step func(string, *whereTracer)) (*Set, error) {
		return compile(ctx, modules, params, step)
	})
}

// CompileOverlay compiles the set of base with sources over it (Overlay, then Compile): the set
// the webhook serves from the built-ins and the policy ConfigMaps. Its errors name the files of
// the sources at fault (blameSources); a set that exceeds l is not compiled again source by
// source, its error already says where it was stopped.
func (l Limits) CompileOverlay(ctx context.Context, base []Module, baseParams map[string]any, sources []Source) ([]Module, map[string]any, *Set, error) {
	modules, params, err := Overlay(base, baseParams, sources)
	if err != nil {
		return nil, nil, nil, err
	}
	set, err := l.Compile(ctx, modules, params)
	var limit *LimitError
	if err != nil && !errors.As(err, &limit) {
		err = l.blameSources(ctx, err, base, baseParams, sources)
	}
	return modules, params, set, err
}

// compile is Compile's load; step says what it is doing, for the error of a limit that stops it.
func compile(ctx context.Context, modules []Module, params map[string]any, step func(string, *whereTracer)) (*Set, error) {
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
	step("compiling", nil)
	compiler := newCompiler().WithStrict(true)
	stopBetweenStages(ctx, compiler)
	compiler.Compile(parsed)
	if compiler.Failed() {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("compile policies: %w", context.Cause(ctx))
		}
		return nil, fmt.Errorf("compile policies: %w", sandboxErrors(compiler.Errors))
	}
	if params == nil {
		params = map[string]any{}
	}
	// Parameters are read on every evaluation; storing them as AST values converts them once per
	// policy set instead of on every read.
	store := inmem.NewFromObjectWithOpts(map[string]any{"daemonguard": map[string]any{"parameters": params}}, inmem.OptReturnASTValuesOnRead(true))

	s := &Set{compiler: compiler, store: store, enforcement: map[string]Action{}}
	for _, m := range modules {
		s.modules = append(s.modules, m.Name)
	}
	sort.Strings(s.modules)
	for name := range policyNames(parsed) {
		s.policies = append(s.policies, name)
	}
	sort.Strings(s.policies)
	step("preparing the queries", nil)
	var err error
	if s.violations, err = s.PrepareQuery(ctx, validateQuery); err != nil {
		return nil, fmt.Errorf("prepare validation query: %w", err)
	}
	for _, mod := range parsed {
		if mod.Package.Path.String() == injectPackage {
			s.hasInject = true
		}
	}
	if s.hasInject {
		if s.decision, err = s.PrepareQuery(ctx, injectQuery); err != nil {
			return nil, fmt.Errorf("prepare inject query: %w", err)
		}
	}
	where := &whereTracer{}
	step("evaluating the enforcement rules", where)
	if err := s.resolveEnforcement(ctx, params, where); err != nil {
		return nil, err
	}
	if err := s.trial(ctx, step); err != nil {
		return nil, err
	}
	return s, nil
}

// PrepareQuery prepares query against the set's modules and parameters, in the sandbox, for
// callers that ask the policies something besides their violations and inject decision (the
// in-process injection export).
func (s *Set) PrepareQuery(ctx context.Context, query string) (rego.PreparedEvalQuery, error) {
	return rego.New(rego.Query(query), rego.Compiler(s.compiler), rego.Store(s.store), rego.StrictBuiltinErrors(true)).PrepareForEval(ctx)
}

// resolveEnforcement evaluates each policy's constant `enforcement` rule once per set and applies
// the overrides from parameters.enforcement, so no request pays for it.
func (s *Set) resolveEnforcement(ctx context.Context, params map[string]any, where *whereTracer) error {
	rs, err := rego.New(
		rego.Query("e = {name: a | some name; a := data.daemonguard.policies[name].enforcement}"),
		rego.Compiler(s.compiler), rego.Store(s.store), rego.StrictBuiltinErrors(true), rego.QueryTracer(where),
	).Eval(ctx)
	if err != nil {
		return fmt.Errorf("evaluate enforcement rules: %w", err)
	}
	if len(rs) == 1 {
		declared, _ := rs[0].Bindings["e"].(map[string]any)
		if err := s.setEnforcement(declared, "policy "); err != nil {
			return err
		}
	}
	overrides, _ := params["enforcement"].(map[string]any)
	return s.setEnforcement(overrides, "parameters.enforcement.")
}

// setEnforcement records the action each policy of actions names; an error names the policy after
// prefix, which says where the action was written.
func (s *Set) setEnforcement(actions map[string]any, prefix string) error {
	for name, a := range actions {
		str, _ := a.(string)
		action, err := parseAction(str)
		if err != nil {
			return fmt.Errorf("%s%s: %w", prefix, name, err)
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
