package inprocess

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// The namespace classes are defined once, by lib.namespace_class in Rego; the generated policy
// reads namespaceClasses into CEL (classExpression). For generated namespaceClasses parameters,
// malformed entries included, and namespaces of every name and label combination they mention,
// the CEL names the class the Rego names.
func TestNamespaceClassesAgreeWithTheRego(t *testing.T) {
	ctx := context.Background()
	builtin, baseParams, err := policy.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	inject, lib, err := builtinInjectModules(builtin)
	if err != nil {
		t.Fatal(err)
	}
	modules := []policy.Module{lib, inject}
	env, err := cel.NewEnv(cel.Variable("variables", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}

	names := []any{"system", "team-a", "team-b", "default", "", 7}
	namespaceLists := []any{nil, []any{}, []any{"prod"}, []any{"prod", "dev"}, []any{"dev", 3}, "prod"}
	selectors := []any{nil, map[string]any{}, map[string]any{"tier": "system"}, map[string]any{"tier": "system", "team": "a"},
		map[string]any{"tier": 1}, map[string]any{"team": "a"}, "tier=system"}
	entry := func(r *rand.Rand) any {
		if r.IntN(12) == 0 {
			return "not an object"
		}
		e := map[string]any{"name": names[r.IntN(len(names))]}
		if ns := namespaceLists[r.IntN(len(namespaceLists))]; ns != nil {
			e["namespaces"] = ns
		}
		if sel := selectors[r.IntN(len(selectors))]; sel != nil {
			e["matchLabels"] = sel
		}
		return e
	}
	type namespace struct {
		name   string
		labels map[string]any
	}
	var namespaces []namespace
	for _, name := range []string{"prod", "dev", "other"} {
		for _, labels := range []map[string]any{{}, {"tier": "system"}, {"team": "a"}, {"tier": "system", "team": "a"}, {"tier": "1"}} {
			namespaces = append(namespaces, namespace{name, labels})
		}
	}

	r := rand.New(rand.NewPCG(1, 2))
	for i := range 150 {
		classes := make([]any, r.IntN(5))
		for j := range classes {
			classes[j] = entry(r)
		}
		params := maps.Clone(baseParams)
		params["namespaceClasses"] = classes
		where := fmt.Sprintf("case %d, namespaceClasses %v", i, classes)

		derived, err := derive(ctx, modules, params)
		if err != nil {
			t.Fatalf("%s: derive: %v", where, err)
		}
		ast, iss := env.Compile(classExpression(derived))
		if iss.Err() != nil {
			t.Fatalf("%s: compile %q: %v", where, classExpression(derived), iss.Err())
		}
		program, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		set, err := policy.Compile(ctx, modules, params)
		if err != nil {
			t.Fatal(err)
		}
		query, err := set.PrepareQuery(ctx, "data.daemonguard.lib.namespace_class")
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range namespaces {
			rs, err := query.Eval(ctx, rego.EvalInput(map[string]any{"namespace": map[string]any{"name": ns.name, "labels": ns.labels}}))
			if err != nil || len(rs) != 1 {
				t.Fatalf("%s: rego for namespace %s %v: %v %v", where, ns.name, ns.labels, rs, err)
			}
			want := rs[0].Expressions[0].Value
			got, _, err := program.Eval(map[string]any{"variables": map[string]any{"namespaceName": ns.name, "namespaceLabels": ns.labels}})
			if err != nil {
				t.Fatalf("%s: CEL for namespace %s %v: %v", where, ns.name, ns.labels, err)
			}
			if got.Value() != want {
				t.Errorf("%s: namespace %s %v: CEL names class %v, Rego %v", where, ns.name, ns.labels, got.Value(), want)
			}
		}
	}
}
