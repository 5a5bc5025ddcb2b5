package policies_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// TestRegoSuite runs every built-in *_test.rego through OPA's tester with the default parameters,
// one Go subtest per Rego test, and fails on a failing test or an empty suite.
func TestRegoSuite(t *testing.T) {
	modules, tests, params, err := policy.BuiltinWithTests()
	if err != nil {
		t.Fatal(err)
	}
	results, err := policy.RunRegoTests(context.Background(), modules, tests, params)
	if err != nil && !errors.Is(err, policy.ErrNoTests) {
		t.Fatal(err)
	}
	if len(results) == 0 {
		t.Fatal("the built-in policies have no Rego tests")
	}
	for _, r := range results {
		t.Run(r.Name, func(t *testing.T) {
			if !r.Passed {
				t.Errorf("%s: %s", r.Location, r.Detail)
			}
		})
	}
}

// Every built-in policy package must have tests of its own.
func TestEveryPolicyHasTests(t *testing.T) {
	modules, tests, _, err := policy.BuiltinWithTests()
	if err != nil {
		t.Fatal(err)
	}
	tested := map[string]bool{}
	for _, m := range tests {
		tested[m.Name[:len(m.Name)-len("_test.rego")]+".rego"] = true
	}
	for _, m := range modules {
		if !tested[m.Name] {
			t.Errorf("%s has no %s", m.Name, m.Name[:len(m.Name)-len(".rego")]+"_test.rego")
		}
	}
}

// The node_agent_grants policy reads the administrator's namespace mark under the key admission
// defines (admission.NodeAgentsLabel): with it, a DaemonSet may tolerate every taint at a
// system-critical priority; without it, both are denied.
func TestNodeAgentGrantsReadsAdmissionsMark(t *testing.T) {
	set, err := policy.CompileDirs(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ds := map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
		"priorityClassName": "system-node-critical",
		"tolerations":       []any{map[string]any{"operator": "Exists"}},
		"containers":        []any{map[string]any{"name": "agent"}},
	}}}}
	tests := map[string]struct {
		labels map[string]string // the namespace's labels
		want   int               // node_agent_grants violations
	}{
		"marked with admission's label": {labels: map[string]string{admission.NodeAgentsLabel: "true"}, want: 0},
		"not marked":                    {labels: map[string]string{}, want: 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			vs, err := set.Validate(context.Background(), &policy.Input{Operation: policy.OpCreate, Object: ds, Namespace: policy.Namespace{Name: "agents", Labels: tc.labels}})
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for _, v := range vs {
				if v.Policy == "node_agent_grants" {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("%d node_agent_grants violations, want %d: %v", got, tc.want, vs)
			}
		})
	}
}

// The Rego's gate limit is the controller's (rolloutapi.MaxGates): admission denies what the
// controller would refuse to run, and nothing it would run.
func TestMaxGatesMatchesRolloutAPI(t *testing.T) {
	set, err := policy.CompileDirs(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	q, err := set.PrepareQuery(context.Background(), "n = data.daemonguard.policies.rollout_annotations.max_gates")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := q.Eval(context.Background())
	if err != nil || len(rs) != 1 {
		t.Fatalf("evaluate max_gates: %v (%d results)", err, len(rs))
	}
	if got := fmt.Sprint(rs[0].Bindings["n"]); got != fmt.Sprint(rolloutapi.MaxGates) {
		t.Errorf("rollout_annotations.max_gates = %s, rolloutapi.MaxGates = %d", got, rolloutapi.MaxGates)
	}
}
