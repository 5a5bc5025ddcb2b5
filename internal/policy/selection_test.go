package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// builtinWith compiles the built-in policies overlaid with sources.
func builtinWith(t *testing.T, opts CompileOptions, sources ...Source) *Set {
	t.Helper()
	modules, params, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	modules, params, err = Overlay(modules, params, sources)
	if err != nil {
		t.Fatal(err)
	}
	set, err := CompileWithOptions(context.Background(), modules, params, opts)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

const customPolicy = `package daemonguard.policies.require_team

violation contains {"field": "metadata.labels.team", "msg": "the DaemonSet has no team label"} if {
	not input.object.metadata.labels.team
}
`

func TestNativeStandsInOnlyForUnchangedBuiltins(t *testing.T) {
	all := append([]string(nil), nativePolicyNames...)
	without := func(name string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == name })
	}
	tests := []struct {
		name       string
		opts       CompileOptions
		sources    []Source
		wantNative []string
		wantInject bool
		wantRest   bool
	}{
		{name: "built-ins", wantNative: all, wantInject: true},
		// OPA evaluates the built-ins in their own query; nothing else is loaded.
		{name: "RegoOnly", opts: CompileOptions{RegoOnly: true}},
		{
			name:       "an extra policy is evaluated by OPA next to the native ones",
			sources:    []Source{{Name: "configmap/dg/team", Files: map[string]string{"team.rego": customPolicy}}},
			wantNative: all, wantInject: true, wantRest: true,
		},
		{
			name: "parameters alone change nothing about who answers",
			sources: []Source{{Name: "configmap/dg/params", Files: map[string]string{
				"parameters.yaml": "policies: {rolling_update_budget: {default: {maxUnavailablePercent: 10}}}",
			}}},
			wantNative: all, wantInject: true,
		},
		{
			name: "a replaced policy is evaluated by OPA",
			sources: []Source{{Name: "configmap/dg/budget", Files: map[string]string{"budget.rego": `package daemonguard.policies.rolling_update_budget

violation contains {"field": "spec", "msg": "replaced"} if false
`}}},
			wantNative: without("rolling_update_budget"), wantInject: true, wantRest: true,
		},
		{
			name: "a replaced inject policy is evaluated by OPA",
			sources: []Source{{Name: "configmap/dg/inject", Files: map[string]string{"inject.rego": `package daemonguard.inject

decision := {"inject": false, "reason": "replaced"}
`}}},
			wantNative: all, wantInject: false,
		},
		{
			name:     "a replaced lib turns the native evaluator off",
			sources:  []Source{{Name: "configmap/dg/lib", Files: map[string]string{"lib.rego": mustRead(t, "../../policies/lib/lib.rego") + "\n# changed\n"}}},
			wantRest: true,
		},
		{
			name: "a package above the built-ins turns the native evaluator off",
			sources: []Source{{Name: "configmap/dg/above", Files: map[string]string{"above.rego": `package daemonguard

note := "a rule here could shadow lib, inject or a policy"
`}}},
			wantRest: true,
		},
		{
			name: "rules under the parameters turn the native evaluator off",
			sources: []Source{{Name: "configmap/dg/params", Files: map[string]string{"params.rego": `package daemonguard.parameters.inject.namespaceClasses

system := {"enabled": false}
`}}},
			wantRest: true,
		},
		{
			name: "rules in daemonguard.policies itself turn the native evaluator off",
			sources: []Source{{Name: "configmap/dg/policies", Files: map[string]string{"policies.rego": `package daemonguard.policies

made_up := {"violation": {{"field": "x", "msg": "made up"}}}
`}}},
			// The inject policy reads nothing under daemonguard.policies.
			wantInject: true, wantRest: true,
		},
		{
			name: "a package below a built-in policy takes it from the native evaluator",
			sources: []Source{{Name: "configmap/dg/below", Files: map[string]string{"below.rego": `package daemonguard.policies.revision_history.extra

x := 1
`}}},
			wantNative: without("revision_history"), wantInject: true, wantRest: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := builtinWith(t, tt.opts, tt.sources...)
			var got []string
			if set.nativeValidate {
				got = append(got, set.builtinValidate...)
			}
			sort.Strings(got)
			want := append([]string(nil), tt.wantNative...)
			sort.Strings(want)
			if !reflect.DeepEqual(got, want) && (len(got) > 0 || len(want) > 0) {
				t.Errorf("native policies = %v, want %v", got, want)
			}
			if set.nativeInject != tt.wantInject {
				t.Errorf("native inject = %v, want %v", set.nativeInject, tt.wantInject)
			}
			if set.hasRest != tt.wantRest {
				t.Errorf("policies left to OPA = %v, want %v", set.hasRest, tt.wantRest)
			}
		})
	}
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// setCase is one evaluation through a whole Set.
type setCase struct {
	name string
	in   Input
}

// fixtureCases are the policy fixtures of the repository, each in a few namespaces and with and
// without cluster facts.
func fixtureCases(t *testing.T) []setCase {
	t.Helper()
	files, err := filepath.Glob("../../testdata/policies/*/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var cases []setCase
	for _, file := range files {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(mustRead(t, file)), &obj); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, ns := range []Namespace{
			{Name: "apps", Labels: map[string]string{"team": "a"}},
			{Name: "kube-system"},
		} {
			for _, cluster := range []*ClusterFacts{nil, {Nodes: 40, MatchingNodes: 3}, {Nodes: 1000, MatchingNodes: 1000}} {
				cases = append(cases, setCase{
					name: filepath.Base(file) + "/" + ns.Name,
					in:   Input{Operation: OpCreate, Object: obj, Namespace: ns, Cluster: cluster},
				})
			}
		}
	}
	return cases
}

// assertSetsAgree evaluates every case through both sets and compares the answers.
func assertSetsAgree(t *testing.T, native, rego *Set, cases []setCase) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cases {
		gotV, errN := native.Validate(ctx, &c.in)
		wantV, errR := rego.Validate(ctx, &c.in)
		if (errN != nil) != (errR != nil) || !reflect.DeepEqual(gotV, wantV) {
			t.Errorf("%s: Validate\nnative: %v %v\nrego:   %v %v", c.name, gotV, errN, wantV, errR)
		}
		gotI, errN := native.Inject(ctx, &c.in)
		wantI, errR := rego.Inject(ctx, &c.in)
		if (errN != nil) != (errR != nil) || !reflect.DeepEqual(gotI, wantI) {
			t.Errorf("%s: Inject\nnative: %+v %v\nrego:   %+v %v", c.name, gotI, errN, wantI, errR)
		}
	}
}

func TestSetAnswersAlikeWithAndWithoutNative(t *testing.T) {
	extra := Source{Name: "configmap/dg/team", Files: map[string]string{
		"team.rego":       customPolicy,
		"parameters.yaml": "enforcement: {on_delete_managed: dryrun}\ninject: {namespaceClasses: {system: {priorityClassName: \"\"}}}",
	}}
	for _, sources := range [][]Source{nil, {extra}} {
		native := builtinWith(t, CompileOptions{}, sources...)
		rego := builtinWith(t, CompileOptions{RegoOnly: true}, sources...)
		assertSetsAgree(t, native, rego, fixtureCases(t))
	}
}

func TestOldObjectJSONReachesPoliciesEvaluatedByOPA(t *testing.T) {
	frozen := Source{Name: "configmap/dg/frozen", Files: map[string]string{"frozen.rego": `package daemonguard.policies.frozen

violation contains {"field": "metadata.labels.frozen", "msg": "the DaemonSet was frozen"} if {
	input.oldObject.metadata.labels.frozen == "true"
}
`}}
	set := builtinWith(t, CompileOptions{}, frozen)
	obj := map[string]any{"metadata": map[string]any{"name": "agent"}}
	for _, tt := range []struct {
		name    string
		old     string
		want    int
		wantErr bool
	}{
		{name: "frozen", old: `{"metadata": {"labels": {"frozen": "true"}}}`, want: 1},
		{name: "not frozen", old: `{"metadata": {"labels": {}}}`, want: 0},
		{name: "not an object", old: `[1]`, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := &Input{Operation: OpUpdate, Object: obj, OldObjectJSON: []byte(tt.old), Namespace: Namespace{Name: "apps"}}
			vs, err := set.Validate(context.Background(), in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			got := 0
			for _, v := range vs {
				if v.Policy == "frozen" {
					got++
				}
			}
			if got != tt.want {
				t.Errorf("frozen violations = %d, want %d (all: %v)", got, tt.want, vs)
			}
		})
	}
}

// TestSetAnswersAlikeOnRandomCases puts the random inputs and parameter sets of the native
// evaluator's own tests through whole Sets, compiled with and without it: whatever a Set answers
// natively, and whatever it hands to OPA, comes out as the Rego-only Set's answer.
func TestSetAnswersAlikeOnRandomCases(t *testing.T) {
	paramSets, inputsPerSet := 16, 150
	if testing.Short() {
		paramSets, inputsPerSet = 4, 40
	}
	modules, _, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(7))
	for range paramSets {
		_, params := randomNativeCase(r)
		native, errN := CompileWithOptions(context.Background(), modules, params, CompileOptions{})
		rego, errR := CompileWithOptions(context.Background(), modules, params, CompileOptions{RegoOnly: true})
		if (errN != nil) != (errR != nil) {
			t.Fatalf("compile: native %v, rego %v", errN, errR)
		}
		if errN != nil {
			continue
		}
		cases := make([]setCase, inputsPerSet)
		for i := range cases {
			in, _ := randomNativeCase(r)
			cases[i] = setCase{name: fmt.Sprintf("case %d", i), in: in}
		}
		assertSetsAgree(t, native, rego, cases)
	}
}

func TestAnOPAPanicIsAnEvaluationError(t *testing.T) {
	set := builtinWith(t, CompileOptions{RegoOnly: true})
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
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), "evaluat") {
		t.Errorf("error %q does not say the evaluation failed", err)
	}
}

// Rules under data.daemonguard.parameters change what OPA reads as parameters; the native
// evaluator must then leave every answer to OPA. A custom policy calling lib functions must not
// change a built-in's message through OPA's per-query memo of function results, with or without
// the native evaluator.
func TestSetsAgreeWhenModulesReachIntoParametersOrLib(t *testing.T) {
	ds := func(annotations map[string]any, maxSurge any) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": "agent", "annotations": annotations},
			"spec": map[string]any{"updateStrategy": map[string]any{"type": "RollingUpdate",
				"rollingUpdate": map[string]any{"maxUnavailable": json.Number("1"), "maxSurge": maxSurge}}},
		}
	}
	cases := []setCase{
		{name: "kube-system", in: Input{Operation: OpCreate, Object: ds(nil, json.Number("0")), Namespace: Namespace{Name: "kube-system"}}},
		{name: "deadline", in: Input{Operation: OpCreate, Object: ds(map[string]any{"daemonguard.io/progress-deadline": "1m"}, json.Number("0")), Namespace: Namespace{Name: "kube-system"}}},
		{name: "big surge", in: Input{Operation: OpCreate, Object: ds(nil, json.Number("1000000")), Namespace: Namespace{Name: "apps"}}},
	}
	for _, source := range []Source{
		{Name: "configmap/dg/params", Files: map[string]string{"params.rego": `package daemonguard.parameters.inject.namespaceClasses

system := {"enabled": false}
`, "deadline.rego": `package daemonguard.parameters.policies.rollout_annotations

system := {"minProgressDeadlineSeconds": 600}
`}},
		{Name: "configmap/dg/poison", Files: map[string]string{"poison.rego": `package daemonguard.policies.a_poison

import data.daemonguard.lib

violation contains {"field": "x", "msg": m} if {
	m := lib.quote(1000000.0)
	m == "never"
}
`}},
	} {
		native := builtinWith(t, CompileOptions{}, source)
		rego := builtinWith(t, CompileOptions{RegoOnly: true}, source)
		assertSetsAgree(t, native, rego, cases)
		// The parameters module must have an effect, or the comparison proves nothing.
		if source.Name == "configmap/dg/params" {
			d, err := native.Inject(context.Background(), &cases[0].in)
			if err != nil || d.Inject {
				t.Errorf("a parameters module disabling injection for kube-system: got %+v, %v", d, err)
			}
		}
	}
}

func TestPoliciesDefinedAboveTheirPackageAreEvaluated(t *testing.T) {
	set := builtinWith(t, CompileOptions{}, Source{Name: "configmap/dg/policies", Files: map[string]string{"policies.rego": `package daemonguard.policies

made_up := {"violation": {{"field": "x", "msg": "made up"}}}
`}})
	vs, err := set.Validate(context.Background(), &Input{Operation: OpCreate, Object: map[string]any{}, Namespace: Namespace{Name: "apps"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Policy == "made_up" && v.Message == "made up" {
			return
		}
	}
	t.Errorf("the policy made_up, defined in package daemonguard.policies, was not evaluated: %v", vs)
}
