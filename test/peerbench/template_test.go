package peerbench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// Gatekeeper's template means what daemonguard's rolling_update_budget means, offline (no node
// count: integers are not bounded by it on either side): for every budget below both deny, or both
// allow. The two are held together here, since Gatekeeper cannot run daemonguard's Rego.
func TestTemplateMeansRollingUpdateBudget(t *testing.T) {
	ctx := context.Background()
	set, err := policy.CompileBuiltin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	template, constraint := templateRego(t)
	for name, tc := range map[string]struct {
		strategy string // spec.updateStrategy as JSON
		hostPort bool   // the container binds hostPort 8080
		denied   bool
	}{
		"the seed's maxUnavailable 1 is allowed":  {strategy: `{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}`},
		"no updateStrategy (defaults) is allowed": {strategy: `null`},
		"50% is allowed":                                           {strategy: `{"rollingUpdate":{"maxUnavailable":"50%"}}`},
		"90% is over the default class's 50%":                      {strategy: `{"rollingUpdate":{"maxUnavailable":"90%"}}`, denied: true},
		"an integer is not bounded without a node count":           {strategy: `{"rollingUpdate":{"maxUnavailable":700}}`},
		"both zero can never update":                               {strategy: `{"rollingUpdate":{"maxUnavailable":0,"maxSurge":0}}`, denied: true},
		"surge with maxUnavailable 0 is allowed":                   {strategy: `{"rollingUpdate":{"maxUnavailable":0,"maxSurge":1}}`},
		"surge beside the default maxUnavailable 1 is refused":     {strategy: `{"rollingUpdate":{"maxSurge":"10%"}}`, denied: true},
		"surge with a host port is refused":                        {strategy: `{"rollingUpdate":{"maxUnavailable":0,"maxSurge":1}}`, hostPort: true, denied: true},
		"a host port without surge is allowed":                     {strategy: `{"rollingUpdate":{"maxUnavailable":1}}`, hostPort: true},
		"a negative maxUnavailable is malformed":                   {strategy: `{"rollingUpdate":{"maxUnavailable":-1}}`, denied: true},
		"a fraction is malformed":                                  {strategy: `{"rollingUpdate":{"maxUnavailable":1.5}}`, denied: true},
		"a percentage above 100 is malformed":                      {strategy: `{"rollingUpdate":{"maxUnavailable":"150%"}}`, denied: true},
		"a number in a string is malformed":                        {strategy: `{"rollingUpdate":{"maxUnavailable":"5"}}`, denied: true},
		"OnDelete is not a rolling update, whatever its budget is": {strategy: `{"type":"OnDelete","rollingUpdate":{"maxUnavailable":"90%"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			obj := daemonSet(t, tc.strategy, tc.hostPort)
			violations, err := set.Validate(ctx, &policy.Input{Operation: policy.OpCreate, Object: obj, Namespace: policy.Namespace{Name: fixture.Namespace}})
			if err != nil {
				t.Fatal(err)
			}
			var ours []string
			for _, v := range violations {
				if v.Policy == "rolling_update_budget" {
					ours = append(ours, v.Message)
				}
			}
			theirs := evalTemplate(t, template, constraint, obj)
			if (len(ours) > 0) != tc.denied || (len(theirs) > 0) != tc.denied {
				t.Errorf("want denied %v; daemonguard's violations %q, the template's %q", tc.denied, ours, theirs)
			}
		})
	}
	// The constraint's bound is the default class's in policies/parameters.yaml.
	_, params, err := policy.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint(lookup(params, "policies", "rolling_update_budget", "default", "maxUnavailablePercent"))
	if got := fmt.Sprint(constraint["maxUnavailablePercent"]); got != want {
		t.Errorf("the constraint allows %s%%, policies/parameters.yaml's default class %s%%", got, want)
	}
}

// templateRego returns the Rego of testdata/daemonset-budget.yaml's template and its constraint's
// parameters.
func templateRego(t *testing.T) (string, map[string]any) {
	t.Helper()
	var rego string
	var params map[string]any
	for doc := range strings.SplitSeq(budgetTemplate, "\n---\n") {
		var obj struct {
			Kind string `json:"kind"`
			Spec struct {
				Targets []struct {
					Code []struct {
						Source struct {
							Rego string `json:"rego"`
						} `json:"source"`
					} `json:"code"`
				} `json:"targets"`
				Parameters map[string]any `json:"parameters"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		switch {
		case obj.Kind == "ConstraintTemplate" && len(obj.Spec.Targets) == 1 && len(obj.Spec.Targets[0].Code) == 1:
			rego = obj.Spec.Targets[0].Code[0].Source.Rego
		case obj.Kind == "K8sDaemonSetBudget":
			params = obj.Spec.Parameters
		}
	}
	if rego == "" || params == nil {
		t.Fatal("testdata/daemonset-budget.yaml lacks the template's one Rego source or the constraint's parameters")
	}
	return rego, params
}

// evalTemplate returns the template's violation messages for obj, as Gatekeeper evaluates it
// (input.review.object, input.parameters), with OPA's Rego v1.
func evalTemplate(t *testing.T, module string, params map[string]any, obj map[string]any) []string {
	t.Helper()
	rs, err := rego.New(
		rego.Query("msgs := [v.msg | some v in data.k8sdaemonsetbudget.violation]"),
		rego.Module("template.rego", module), rego.SetRegoVersion(ast.RegoV1),
		rego.Input(map[string]any{"review": map[string]any{"object": obj}, "parameters": params}),
	).Eval(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("evaluate the template: %v (%d results)", err, len(rs))
	}
	var msgs []string
	for _, m := range rs[0].Bindings["msgs"].([]any) {
		msgs = append(msgs, m.(string))
	}
	return msgs
}

// daemonSet is the benchmark's DaemonSet with strategy as its spec.updateStrategy and, with
// hostPort, hostPort 8080 on its container's port, as generic JSON with json.Number numbers.
func daemonSet(t *testing.T, strategy string, hostPort bool) map[string]any {
	t.Helper()
	ds, err := fixture.SubmittedDaemonSet()
	if err != nil {
		t.Fatal(err)
	}
	if hostPort {
		ds.Spec.Template.Spec.Containers[0].Ports[0].HostPort = 8080
	}
	raw, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		t.Fatal(err)
	}
	var s any
	dec = json.NewDecoder(strings.NewReader(strategy))
	dec.UseNumber()
	if err := dec.Decode(&s); err != nil {
		t.Fatal(err)
	}
	spec := obj["spec"].(map[string]any)
	if s == nil {
		delete(spec, "updateStrategy")
	} else {
		spec["updateStrategy"] = s
	}
	return obj
}

// lookup follows keys through nested maps; nil where one is missing.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
