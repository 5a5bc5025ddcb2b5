package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// document returns the input document of an evaluation as an AST value over the generic maps the
// caller decoded: the object is not serialised and parsed again, and ast.LazyObject converts a
// field to AST only when a policy reads it, so the parts of a DaemonSet no rule looks at (most of
// the pod template on the compliant path) are never converted. Benchmarks: docs/performance.md.
func (in *Input) document() ast.Value {
	labels := make(map[string]any, len(in.Namespace.Labels))
	for k, v := range in.Namespace.Labels {
		labels[k] = v
	}
	doc := map[string]any{
		"operation": string(in.Operation),
		"object":    withoutManagedFields(in.Object),
		"namespace": map[string]any{"name": in.Namespace.Name, "labels": labels},
	}
	if in.OldObject != nil {
		doc["oldObject"] = withoutManagedFields(in.OldObject)
	}
	if in.Cluster != nil {
		doc["cluster"] = map[string]any{"nodes": in.Cluster.Nodes, "matchingNodes": in.Cluster.MatchingNodes}
	}
	if in.PriorityClass != nil {
		doc["priorityClass"] = map[string]any{"name": in.PriorityClass.Name, "value": int(in.PriorityClass.Value)}
	}
	return ast.LazyObject(doc)
}

// withoutManagedFields returns obj without metadata.managedFields, copying only the two maps on
// the way (obj itself is not modified). No policy has a use for managedFields, and it is the
// largest nested part of a stored object.
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

// Validate returns every violation of the object, sorted by policy and field, each with the action
// that applies. An error means the policies could not be evaluated: the caller decides by its
// failure mode, never by treating the object as compliant.
func (s *Set) Validate(ctx context.Context, in *Input) ([]Violation, error) {
	return s.validate(ctx, in)
}

// validate is Validate with evaluation options (the trial's tracer).
func (s *Set) validate(ctx context.Context, in *Input, opts ...rego.EvalOption) ([]Violation, error) {
	rs, err := eval(ctx, s.violations, in.document(), opts...)
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
	var out []Violation
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

// Inject evaluates the inject policy. A set without one injects nothing.
func (s *Set) Inject(ctx context.Context, in *Input) (InjectDecision, error) {
	return s.inject(ctx, in)
}

// inject is Inject with evaluation options (the trial's tracer).
func (s *Set) inject(ctx context.Context, in *Input, opts ...rego.EvalOption) (InjectDecision, error) {
	if !s.hasInject {
		return InjectDecision{Reason: "no inject policy loaded"}, nil
	}
	rs, err := eval(ctx, s.decision, in.document(), opts...)
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

// eval runs a prepared query on an AST input. A panic in OPA (it has some for inputs it cannot
// represent, such as a NaN a Go caller put in the object) is an evaluation error, so the caller's
// failure mode decides and the process lives on.
//
// Two things OPA does per evaluation by default are done cheaper here, with the same effect: it
// starts a goroutine that waits for ctx to end to cancel the evaluation, where context.AfterFunc
// registers the same cancellation without a goroutine; and it times the evaluation into a new
// metrics object that nobody reads, where metrics.NoOp records nothing.
func eval(ctx context.Context, q rego.PreparedEvalQuery, input ast.Value, opts ...rego.EvalOption) (rs rego.ResultSet, err error) {
	defer func() {
		if p := recover(); p != nil {
			rs, err = nil, fmt.Errorf("policy evaluation failed: OPA panicked: %v", p)
		}
	}()
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	defer stop()
	return q.Eval(ctx, append([]rego.EvalOption{rego.EvalParsedInput(input), rego.EvalExternalCancel(cancel), rego.EvalMetrics(noMetrics)}, opts...)...)
}

// noMetrics is the metrics of every evaluation: none (eval).
var noMetrics = metrics.NoOp()

// Enforcement returns the action of a policy: its override, its own rule, or deny.
func (s *Set) Enforcement(policy string) Action {
	if a, ok := s.enforcement[policy]; ok {
		return a
	}
	return Deny
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
