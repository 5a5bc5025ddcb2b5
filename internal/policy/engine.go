// Package policy compiles daemonguard's Rego policies into an in-memory, concurrency-safe policy
// set and evaluates DaemonSets against it: which tolerations and priority class to inject, and which
// violations to deny, warn about or record. Queries are prepared once per policy set; a new set is
// swapped in atomically, so a reload never blocks or disturbs an evaluation in flight.
package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/topdown"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/genericjson"
	"github.com/daemonguard/daemonguard/policies"
)

// Action is what happens to a request that violates a policy.
type Action string

// Enforcement actions.
const (
	// Deny rejects the request with the violation's message.
	Deny Action = "deny"
	// Warn admits the request and returns the message as an admission warning (kubectl prints it).
	Warn Action = "warn"
	// DryRun admits the request silently; the violation is only logged, counted and audited.
	DryRun Action = "dryrun"
)

func parseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case Deny, Warn, DryRun:
		return a, nil
	}
	return "", fmt.Errorf("enforcement action %q is not one of deny, warn, dryrun", s)
}

// Violation is one policy's objection to an object.
type Violation struct {
	Policy  string `json:"policy"`
	Field   string `json:"field"`
	Message string `json:"message"`
	Action  Action `json:"action"`
}

func (v Violation) String() string {
	return fmt.Sprintf("[%s] %s: %s", v.Policy, v.Field, v.Message)
}

// InjectDecision is what the inject policy wants added to a DaemonSet's pod template.
type InjectDecision struct {
	Inject            bool                `json:"inject"`
	Reason            string              `json:"reason,omitempty"`
	Tolerations       []corev1.Toleration `json:"tolerations,omitempty"`
	PriorityClassName string              `json:"priorityClassName,omitempty"`
}

// Operation says why an object is evaluated; policies can tell admission from audit and CLI.
type Operation string

// Operations in the input document.
const (
	OpCreate Operation = "CREATE"
	OpUpdate Operation = "UPDATE"
	OpAudit  Operation = "AUDIT"
	OpCheck  Operation = "CHECK"
)

// Namespace is what policies know of the object's namespace.
type Namespace struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// ClusterFacts are facts only a live cluster can supply; nil offline.
type ClusterFacts struct {
	Nodes         int `json:"nodes"`
	MatchingNodes int `json:"matchingNodes"`
}

// Input is the input document of every evaluation (see policies/README.md). Object and OldObject
// are the DaemonSet as generic JSON, so fields unknown to this build still reach the policies.
type Input struct {
	Operation Operation
	Object    map[string]any
	OldObject map[string]any
	// OldObjectJSON is the old object as a JSON object, for a caller that has not decoded it: it
	// is decoded into the input document only when OPA evaluates a policy, since no built-in
	// policy reads the old object. So an old object OPA cannot take (a number out of its range)
	// fails an evaluation only when OPA evaluates; the API server sends none such. Set OldObject
	// or OldObjectJSON, not both.
	OldObjectJSON []byte
	Namespace     Namespace
	Cluster       *ClusterFacts
}

func (in *Input) value() (ast.Value, error) {
	labels := make(map[string]any, len(in.Namespace.Labels))
	for k, v := range in.Namespace.Labels {
		labels[k] = v
	}
	doc := map[string]any{
		"operation": string(in.Operation),
		"object":    withoutManagedFields(in.Object),
		"namespace": map[string]any{"name": in.Namespace.Name, "labels": labels},
	}
	old := in.OldObject
	if old == nil && len(in.OldObjectJSON) > 0 {
		// Decoded as the webhook decodes the object itself: numbers stay exact.
		var err error
		if old, err = genericjson.DecodeObject(in.OldObjectJSON, genericjson.Options{OmitManagedFields: true}); err != nil {
			return nil, fmt.Errorf("decode the old object: %v", err)
		}
	}
	if old != nil {
		doc["oldObject"] = withoutManagedFields(old)
	}
	if in.Cluster != nil {
		doc["cluster"] = map[string]any{"nodes": in.Cluster.Nodes, "matchingNodes": in.Cluster.MatchingNodes}
	}
	// InterfaceToValue walks the generic map directly; no JSON round trip on the hot path.
	return ast.InterfaceToValue(doc)
}

// withoutManagedFields returns obj without metadata.managedFields, copying only the two maps on
// the way (obj itself is not modified). managedFields is the largest nested part of a stored
// object, no policy has a use for it, and converting it to AST was most of the cost of the input.
func withoutManagedFields(obj map[string]any) map[string]any {
	meta, ok := obj["metadata"].(map[string]any)
	if !ok {
		return obj
	}
	if _, ok := meta["managedFields"]; !ok {
		return obj
	}
	metaCopy := make(map[string]any, len(meta))
	for k, v := range meta {
		if k != "managedFields" {
			metaCopy[k] = v
		}
	}
	objCopy := make(map[string]any, len(obj))
	for k, v := range obj {
		objCopy[k] = v
	}
	objCopy["metadata"] = metaCopy
	return objCopy
}

// Module is one Rego file and where it came from (a path, or configmap/NAME/KEY), for errors.
type Module struct {
	Name   string
	Source string
}

// Set is one compiled policy set. It is immutable and safe for concurrent use.
type Set struct {
	// validateBuiltin evaluates the built-in policies loaded unchanged (builtinValidate) with OPA,
	// validateRest every other policy (hasRest says whether there is any).
	validateBuiltin rego.PreparedEvalQuery
	builtinValidate []string
	validateRest    rego.PreparedEvalQuery
	hasRest         bool
	inject          rego.PreparedEvalQuery
	hasInject       bool
	// native answers builtinValidate when nativeValidate (and the inject decision when
	// nativeInject) without OPA; nil when it answers nothing.
	native         *native
	nativeValidate bool
	nativeInject   bool
	enforcement    map[string]Action
	modules        []string
	policies       []string
	// deterministic is true when no module calls a nondeterministic built-in (time.now_ns,
	// http.send, rand.intn, ...): the set's answers then depend on the input alone.
	deterministic bool
}

const (
	injectQuery = "decision = data.daemonguard.inject.decision"

	policiesPath   = "data.daemonguard.policies"
	parametersPath = "data.daemonguard.parameters"
	libPath        = "data.daemonguard.lib"
	injectPath     = "data.daemonguard.inject"
)

// validateQueryOf is a query for the violations of the named policies.
func validateQueryOf(names []string) string {
	terms := make([]string, 0, len(names))
	for _, name := range names {
		terms = append(terms, ast.StringTerm(name).String())
	}
	sort.Strings(terms)
	return "violations = {name: v | some name in [" + strings.Join(terms, ", ") + "]; v := data.daemonguard.policies[name].violation}"
}

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

// definesPolicies reports whether a module's package is daemonguard.policies or above it, where
// rules can make up policies that policyNames does not see.
func definesPolicies(parsed map[string]*ast.Module) bool {
	for _, mod := range parsed {
		p := mod.Package.Path.String()
		if p == policiesPath || strings.HasPrefix(policiesPath, p+".") {
			return true
		}
	}
	return false
}

// embeddedSources maps the package path of each embedded built-in module to its source. Should the
// embedded files not load or parse (a broken build), it is empty and every policy goes to OPA,
// whose compilation of the same files then reports the error.
var embeddedSources = sync.OnceValue(func() map[string]string {
	modules, _, err := Builtin()
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(modules))
	for _, m := range modules {
		mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
		if err != nil {
			return nil
		}
		out[mod.Package.Path.String()] = m.Source
	}
	return out
})

// unchangedBuiltins returns the package paths of the built-in modules loaded exactly as embedded
// and left alone by every other module: no other module's package is that package, below it, or
// above it (a module in package daemonguard could define a rule named lib, or policies). Only
// for those may the native implementation stand in for the Rego.
func unchangedBuiltins(parsed map[string]*ast.Module, modules []Module) map[string]bool {
	embedded := embeddedSources()
	count := map[string]int{}
	var others []string
	for _, m := range modules {
		mod, ok := parsed[m.Name]
		if !ok {
			return nil
		}
		p := mod.Package.Path.String()
		if src, ok := embedded[p]; ok && src == m.Source {
			count[p]++
			continue
		}
		others = append(others, p)
	}
	related := func(a, b string) bool {
		return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(a, b+"[") ||
			strings.HasPrefix(b, a+".") || strings.HasPrefix(b, a+"[")
	}
	for _, o := range others {
		// Rules under data.daemonguard.parameters are merged by OPA into the parameters every
		// built-in reads, but the native implementation only knows the parameters document.
		if related(o, parametersPath) {
			return nil
		}
	}
	out := map[string]bool{}
	for p, n := range count {
		if n != 1 {
			continue
		}
		clean := true
		for _, o := range others {
			if related(o, p) {
				clean = false
				break
			}
		}
		out[p] = clean
	}
	return out
}

// CompileOptions change how a compiled set evaluates, not what it answers.
type CompileOptions struct {
	// RegoOnly evaluates the built-in policies with OPA too, instead of with their native
	// implementation. The answers are the same (the differential tests hold the native
	// implementation to the Rego); this exists for those tests, for A/B measurements, and as an
	// escape hatch.
	RegoOnly bool
}

// Compile parses and compiles modules with params as data.daemonguard.parameters and prepares the
// queries. Errors name the module and line.
func Compile(ctx context.Context, modules []Module, params map[string]any) (*Set, error) {
	return CompileWithOptions(ctx, modules, params, CompileOptions{})
}

// CompileWithOptions is Compile with options.
//
// Built-in policies that are loaded unchanged (same source as the embedded module, and no other
// module defines rules in their package, in daemonguard.lib, or in a package above them) are
// answered by a native Go implementation of the same rules, which is an order of magnitude faster
// than OPA's interpreter. Everything else, and any input the native implementation is not certain
// to answer exactly as the Rego would, is evaluated by OPA.
func CompileWithOptions(ctx context.Context, modules []Module, params map[string]any, opts CompileOptions) (*Set, error) {
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

	s := &Set{enforcement: map[string]Action{}, deterministic: !callsNondeterministicBuiltins(compiler)}
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
	// The built-in policies loaded unchanged are evaluated apart from every other policy, natively
	// or in a query of their own: in one query, OPA's per-query memo of function results lets a
	// policy that calls lib functions change what a built-in prints (lib.quote of an equal number
	// written another way), and the native answer is the built-in's own.
	var builtins []string
	rest := policyNames(parsed)
	unchanged := unchangedBuiltins(parsed, modules)
	for _, name := range nativePolicyNames {
		if unchanged[policiesPath+"."+name] && unchanged[libPath] {
			builtins = append(builtins, name)
			delete(rest, name)
		}
	}
	var err error
	if len(builtins) > 0 {
		if s.validateBuiltin, err = prepare(validateQueryOf(builtins)); err != nil {
			return nil, fmt.Errorf("prepare validation query: %w", err)
		}
	}
	definesMore := definesPolicies(parsed)
	if len(rest) > 0 || definesMore {
		s.hasRest = true
		names := make([]string, 0, len(rest))
		for name := range rest {
			names = append(names, name)
		}
		query := validateQueryOf(names)
		if definesMore {
			// Rules in a package at or above daemonguard.policies can define policies of any
			// name: ask OPA for all of them (no built-in is answered apart then, see
			// unchangedBuiltins).
			query = "violations = {name: v | v := data.daemonguard.policies[name].violation}"
		}
		if s.validateRest, err = prepare(query); err != nil {
			return nil, fmt.Errorf("prepare validation query: %w", err)
		}
	}
	s.builtinValidate = builtins
	if !opts.RegoOnly {
		s.nativeInject = unchanged[injectPath] && unchanged[libPath]
		s.nativeValidate = len(builtins) > 0
		if s.nativeValidate || s.nativeInject {
			s.native = newNative(params)
		}
	}
	for _, mod := range parsed {
		if mod.Package.Path.String() == "data.daemonguard.inject" {
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

// callsNondeterministicBuiltins reports whether any compiled module calls a built-in whose result
// depends on more than its arguments (time, randomness, the network, the runtime).
func callsNondeterministicBuiltins(c *ast.Compiler) bool {
	found := false
	check := func(op ast.Ref) {
		if b, ok := ast.BuiltinMap[op.String()]; ok && b.Nondeterministic {
			found = true
		}
	}
	for _, m := range c.Modules {
		ast.WalkExprs(m, func(e *ast.Expr) bool {
			if e.IsCall() {
				check(e.Operator())
			}
			return false
		})
		ast.WalkTerms(m, func(t *ast.Term) bool {
			if call, ok := t.Value.(ast.Call); ok && len(call) > 0 {
				if op, ok := call[0].Value.(ast.Ref); ok {
					check(op)
				}
			}
			return false
		})
	}
	return found
}

// Deterministic reports whether the set's decisions depend on the input alone, so that a caller
// may reuse the decision for an identical input (same set, same input document). False when any
// module calls a nondeterministic built-in such as time.now_ns or http.send.
func (s *Set) Deterministic() bool { return s.deterministic }

// Modules lists the names of the modules compiled into the set.
func (s *Set) Modules() []string { return s.modules }

// Policies lists the validation policies of the set (the packages below daemonguard.policies),
// sorted; the audit reports a pass for each one an object does not violate. Rules written in
// daemonguard.policies itself or above it can make up further policies, seen only when violated.
func (s *Set) Policies() []string { return s.policies }

// Enforcement returns the action of a policy: its override, its own rule, or deny.
func (s *Set) Enforcement(policy string) Action {
	if a, ok := s.enforcement[policy]; ok {
		return a
	}
	return Deny
}

// Validate returns every violation of the object, sorted by policy and field, each with the action
// that applies. An error means the policies could not be evaluated: the caller decides by its
// failure mode, never by treating the object as compliant.
func (s *Set) Validate(ctx context.Context, in *Input) ([]Violation, error) {
	var out []Violation
	answered := false
	if s.nativeValidate {
		// ok is false when the native implementation is not certain to answer this input as the
		// Rego would: OPA answers it.
		var vs []Violation
		if vs, answered = s.native.validate(s.builtinValidate, in); answered {
			for i := range vs {
				vs[i].Action = s.Enforcement(vs[i].Policy)
			}
			out = vs
		}
	}
	var doc ast.Value // the input document, built once if OPA evaluates anything
	var err error
	if !answered && len(s.builtinValidate) > 0 {
		if out, err = s.validateWithRego(ctx, s.validateBuiltin, in, &doc, out); err != nil {
			return nil, err
		}
	}
	if s.hasRest {
		if out, err = s.validateWithRego(ctx, s.validateRest, in, &doc, out); err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Policy != out[j].Policy {
			return out[i].Policy < out[j].Policy
		}
		if out[i].Field != out[j].Field {
			return out[i].Field < out[j].Field
		}
		return out[i].Message < out[j].Message
	})
	return out, nil
}

// validateWithRego appends to out the violations that OPA finds with query; doc caches the input document between the calls of one Validate.
func (s *Set) validateWithRego(ctx context.Context, query rego.PreparedEvalQuery, in *Input, doc *ast.Value, out []Violation) ([]Violation, error) {
	if *doc == nil {
		v, err := in.value()
		if err != nil {
			return nil, fmt.Errorf("build policy input: %w", err)
		}
		*doc = v
	}
	rs, err := eval(ctx, query, *doc)
	if err != nil {
		return nil, fmt.Errorf("evaluate policies: %w", err)
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("evaluate policies: %d results, want 1", len(rs))
	}
	byPolicy, ok := rs[0].Bindings["violations"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("evaluate policies: violations are %T, want an object", rs[0].Bindings["violations"])
	}
	for policy, set := range byPolicy {
		items, ok := set.([]any)
		if !ok {
			return nil, fmt.Errorf("policy %s: violation is %T, want a set", policy, set)
		}
		for _, item := range items {
			obj, ok := item.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("policy %s: violation %v is not an object with field and msg", policy, item)
			}
			field, _ := obj["field"].(string)
			msg, ok := obj["msg"].(string)
			if !ok {
				return nil, fmt.Errorf("policy %s: violation %v has no string msg", policy, item)
			}
			out = append(out, Violation{Policy: policy, Field: field, Message: msg, Action: s.Enforcement(policy)})
		}
	}
	return out, nil
}

// noMetrics is shared by every evaluation: nothing reads OPA's per-query timers, and creating them
// costs an allocation and a clock read each.
var noMetrics = metrics.NoOp()

// eval runs a prepared query on an AST input, on one of the long-lived evaluation goroutines when
// one is idle (see workers). Cancellation of ctx still stops the evaluation, but through
// context.AfterFunc, which starts no goroutine unless ctx is actually cancelled (OPA's default
// starts one per evaluation to watch ctx). A panic in OPA (it has some for inputs it cannot
// represent, such as a NaN in a Go map) is an evaluation error, so the caller's failure mode
// decides, and the process lives on.
func eval(ctx context.Context, q rego.PreparedEvalQuery, input ast.Value) (rs rego.ResultSet, err error) {
	evalWorkers.run(func() {
		defer func() {
			if p := recover(); p != nil {
				rs, err = nil, fmt.Errorf("policy evaluation failed: OPA panicked: %v", p)
			}
		}()
		cancel := topdown.NewCancel()
		stop := context.AfterFunc(ctx, cancel.Cancel)
		defer stop()
		rs, err = q.Eval(ctx, rego.EvalParsedInput(input), rego.EvalMetrics(noMetrics), rego.EvalExternalCancel(cancel))
	})
	return rs, err
}

// workers run functions on long-lived goroutines. OPA's evaluator recurses deeply, and a request's
// goroutine starts with a small stack that the runtime grows by copying, several times per
// evaluation: under load that copying was 10-15% of the webhook's CPU. A worker's stack stays
// grown between evaluations.
type workers struct {
	start sync.Once
	jobs  chan func()
}

var evalWorkers workers

// run calls f on an idle worker and waits for it, or calls f itself when no worker is idle, so
// it never queues behind another evaluation (one that blocks, say in http.send, holds up no other).
// A panic in f is raised again in the caller.
func (w *workers) run(f func()) {
	w.start.Do(func() {
		w.jobs = make(chan func())
		for range max(2, runtime.GOMAXPROCS(0)) {
			go func() {
				for job := range w.jobs {
					job()
				}
			}()
		}
	})
	done := make(chan any, 1)
	job := func() {
		defer func() { done <- recover() }()
		f()
	}
	select {
	case w.jobs <- job:
		if p := <-done; p != nil {
			panic(p)
		}
	default:
		f()
	}
}

// Inject evaluates the inject policy. A set without one injects nothing.
func (s *Set) Inject(ctx context.Context, in *Input) (InjectDecision, error) {
	if !s.hasInject {
		return InjectDecision{Reason: "no inject policy loaded"}, nil
	}
	if s.nativeInject {
		if d, ok := s.native.inject(in); ok {
			return d, nil
		}
	}
	v, err := in.value()
	if err != nil {
		return InjectDecision{}, fmt.Errorf("build policy input: %w", err)
	}
	rs, err := eval(ctx, s.inject, v)
	if err != nil {
		return InjectDecision{}, fmt.Errorf("evaluate inject policy: %w", err)
	}
	if len(rs) != 1 {
		return InjectDecision{}, fmt.Errorf("evaluate inject policy: decision is undefined or not unique (%d results)", len(rs))
	}
	// The decision is small; a JSON round trip gives strict typing of tolerations for free.
	raw, err := json.Marshal(rs[0].Bindings["decision"])
	if err != nil {
		return InjectDecision{}, fmt.Errorf("encode inject decision: %w", err)
	}
	var d InjectDecision
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return InjectDecision{}, fmt.Errorf("inject decision %s: %w", raw, err)
	}
	return d, nil
}

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

// Engine holds the policy set in force and swaps it atomically on reload.
type Engine struct {
	current atomic.Pointer[Set]
}

// NewEngine returns an engine serving set.
func NewEngine(set *Set) *Engine {
	e := &Engine{}
	e.current.Store(set)
	return e
}

// Set returns the policy set in force.
func (e *Engine) Set() *Set { return e.current.Load() }

// Swap puts a new set in force; evaluations already running finish on the old one.
func (e *Engine) Swap(set *Set) { e.current.Store(set) }
