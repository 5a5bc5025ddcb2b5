package policy

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
)

func compileOne(t *testing.T, source string) *Set {
	t.Helper()
	set, err := Compile(context.Background(), []Module{{Name: "p.rego", Source: source}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// metadata.managedFields is left out of the input; the caller's object is not modified.
func TestInputLeavesOutManagedFields(t *testing.T) {
	set := compileOne(t, `package daemonguard.policies.p

violation contains {"field": "metadata.managedFields", "msg": "seen"} if input.object.metadata.managedFields
violation contains {"field": "metadata.managedFields", "msg": "old seen"} if input.oldObject.metadata.managedFields
violation contains {"field": "metadata.name", "msg": "name seen"} if input.object.metadata.name == "x"
`)
	obj := map[string]any{"metadata": map[string]any{"name": "x", "managedFields": []any{map[string]any{"manager": "m"}}}}
	old := map[string]any{"metadata": map[string]any{"name": "x", "managedFields": []any{}}}
	vs, err := set.Validate(context.Background(), &Input{Operation: OpUpdate, Object: obj, OldObject: old})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Message != "name seen" {
		t.Errorf("violations %v, want only the name", vs)
	}
	if _, ok := obj["metadata"].(map[string]any)["managedFields"]; !ok {
		t.Error("the caller's object lost its managedFields")
	}
}

// A cancelled context stops an evaluation with an error, never with an empty (compliant) answer.
// The range comes from the input, so the set passes its trial and only this input is slow.
func TestCancelledEvaluationIsAnError(t *testing.T) {
	set := compileOne(t, `package daemonguard.policies.p

violation contains {"field": "f", "msg": "m"} if {
	some i in numbers.range(1, input.object.n)
	i < 0
}
`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if vs, err := set.Validate(ctx, &Input{Operation: OpCheck, Object: map[string]any{"n": 100000000}}); err == nil {
		t.Errorf("no error, violations %v", vs)
	}
}

// builtinWith compiles the built-in policies overlaid with sources.
func builtinWith(t *testing.T, sources ...Source) *Set {
	t.Helper()
	modules, params, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	modules, params, err = Overlay(modules, params, sources)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(context.Background(), modules, params)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestAnOPAPanicIsAnEvaluationError(t *testing.T) {
	set := builtinWith(t)
	// No JSON decodes to NaN, but a Go caller can build one; OPA panics when a policy does
	// arithmetic on it.
	in := &Input{Operation: OpCheck, Object: map[string]any{
		"spec": map[string]any{"updateStrategy": map[string]any{"rollingUpdate": map[string]any{"maxUnavailable": math.NaN()}}},
	}}
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Validate panicked: %v", p)
			}
		}()
		_, err = set.Validate(context.Background(), in)
	}()
	if err == nil {
		t.Skip("this OPA version evaluates a NaN without panicking or failing")
	}
	if !strings.Contains(err.Error(), "evaluat") {
		t.Errorf("error %q does not say the evaluation failed", err)
	}
}

// Rego in ConfigMaps can do anything the built-ins do: define parameters as rules, add policies
// (also from a package above daemonguard.policies), and replace a built-in.
func TestOverlaidRegoIsEvaluated(t *testing.T) {
	ds := map[string]any{"metadata": map[string]any{"name": "agent"}, "spec": map[string]any{}}
	tests := map[string]struct {
		source Source
		check  func(t *testing.T, set *Set)
	}{
		"parameters written as Rego rules turn injection off for a class": {
			source: Source{Name: "configmap/dg/params", Files: map[string]string{"params.rego": "package daemonguard.parameters.inject.namespaceClasses\n\nsystem := {\"enabled\": false}\n"}},
			check: func(t *testing.T, set *Set) {
				in := &Input{Operation: OpCreate, Object: ds, Namespace: Namespace{Name: "kube-system"}}
				if d, err := builtinWith(t).Inject(context.Background(), in); err != nil || !d.Inject {
					t.Fatalf("the built-ins alone: %+v, %v; want an injection, or this case proves nothing", d, err)
				}
				d, err := set.Inject(context.Background(), in)
				if err != nil || d.Inject {
					t.Errorf("decision %+v, %v; want no injection", d, err)
				}
			},
		},
		"a policy defined in package daemonguard.policies": {
			source: Source{Name: "configmap/dg/policies", Files: map[string]string{"policies.rego": "package daemonguard.policies\n\nmade_up := {\"violation\": {{\"field\": \"x\", \"msg\": \"made up\"}}}\n"}},
			check: func(t *testing.T, set *Set) {
				vs, err := set.Validate(context.Background(), &Input{Operation: OpCreate, Object: ds, Namespace: Namespace{Name: "apps"}})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.ContainsFunc(vs, func(v Violation) bool { return v.Policy == "made_up" && v.Message == "made up" && v.Action == Deny }) {
					t.Errorf("violations %v lack made_up", vs)
				}
			},
		},
		"a replaced built-in answers with the replacement": {
			source: Source{Name: "configmap/dg/inject", Files: map[string]string{"inject.rego": "package daemonguard.inject\n\ndecision := {\"inject\": false, \"reason\": \"replaced\"}\n"}},
			check: func(t *testing.T, set *Set) {
				d, err := set.Inject(context.Background(), &Input{Operation: OpCreate, Object: ds, Namespace: Namespace{Name: "apps"}})
				if err != nil || d.Inject || d.Reason != "replaced" {
					t.Errorf("decision %+v, %v; want the replacement's", d, err)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) { tc.check(t, builtinWith(t, tc.source)) })
	}
}
