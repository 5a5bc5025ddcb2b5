package policies_test

import (
	"context"
	"errors"
	"testing"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// TestRegoSuite runs every built-in *_test.rego through OPA's tester with the default parameters,
// one Go subtest per Rego test, and fails on a failing test or an empty suite.
func TestRegoSuite(t *testing.T) {
	modules, tests, params, err := policy.BuiltinWithTests()
	if err != nil {
		t.Fatal(err)
	}
	results, err := policy.RunRegoTests(context.Background(), modules, tests, params)
	if errors.Is(err, policy.ErrNoTests) || len(results) == 0 {
		t.Fatal("the built-in policies have no Rego tests")
	}
	if err != nil {
		t.Fatal(err)
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
