package webhook

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// explodingSet is a policy set that compiles but fails at evaluation: a strict built-in error on a
// value only known per request (an annotation the load's trial DaemonSets do not carry, so the set
// loads).
func explodingSet(t *testing.T) *policy.Set {
	t.Helper()
	set, err := policy.Compile(context.Background(), []policy.Module{{Name: "explodes.rego", Source: `package daemonguard.policies.explodes

violation contains {"field": "metadata.name", "msg": "x"} if {
	to_number(input.object.metadata.annotations["example.com/replicas"]) > 0
}
`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// A policy that compiles but fails at evaluation (here a strict built-in error on a value only
// known per request) must never let a request through silently: deny by default, or admit with an
// explicit warning in the warn failure mode.
func TestEvaluationErrorsFollowTheFailureMode(t *testing.T) {
	set := explodingSet(t)
	body := review("apps", "v1", "DaemonSet", "CREATE", strings.Replace(seedObject, `"name":"nginx-ds",`, `"name":"nginx-ds","annotations":{"example.com/replicas":"many"},`, 1))
	for mode, check := range map[admission.FailureMode]func(allowed bool, msg string, warnings []string) string{
		admission.FailClosed: func(allowed bool, msg string, _ []string) string {
			if allowed || !strings.Contains(msg, "could not evaluate") || !strings.Contains(msg, "to_number") {
				return "want a denial naming the evaluation error"
			}
			return ""
		},
		admission.FailOpenWithWarning: func(allowed bool, _ string, warnings []string) string {
			if !allowed || len(warnings) != 1 || !strings.Contains(warnings[0], "admitted this object unchecked") {
				return "want admission with an explicit warning"
			}
			return ""
		},
	} {
		t.Run(string(mode), func(t *testing.T) {
			h := &Handlers{Engine: policy.NewEngine(set), FailureMode: mode, Log: logr.Discard()}
			code, resp := serve(h.Endpoints()[ValidateDaemonSetPath], []byte(body))
			if code != http.StatusOK || resp == nil {
				t.Fatalf("HTTP %d, response %v", code, resp)
			}
			msg := ""
			if resp.Result != nil {
				msg = resp.Result.Message
			}
			if problem := check(resp.Allowed, msg, resp.Warnings); problem != "" {
				t.Errorf("%s: allowed=%v message=%q warnings=%v", problem, resp.Allowed, msg, resp.Warnings)
			}
		})
	}
}
