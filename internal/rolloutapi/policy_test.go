package rolloutapi_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/rego"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// builtinQuery prepares query over the built-in policies with their default parameters, as the
// webhook compiles them.
func builtinQuery(t testing.TB, query string) rego.PreparedEvalQuery {
	t.Helper()
	set, err := policy.CompileBuiltin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	q, err := set.PrepareQuery(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// review is the input document the policies see for ds, decoded from JSON as the webhook does.
func review(t testing.TB, ds *appsv1.DaemonSet) map[string]any {
	t.Helper()
	raw, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		t.Fatal(err)
	}
	return map[string]any{"operation": "CREATE", "object": obj, "namespace": map[string]any{"name": "default", "labels": map[string]any{}}}
}

// holds tells whether query (a rule without arguments) is true for ds.
func holds(t *testing.T, q rego.PreparedEvalQuery, ds *appsv1.DaemonSet) bool {
	t.Helper()
	rs, err := q.Eval(context.Background(), rego.EvalInput(review(t, ds)))
	if err != nil {
		t.Fatal(err)
	}
	return len(rs) == 1 && rs[0].Expressions[0].Value == true
}

// "Managed" means one thing: the policies' lib.rollout_managed is rolloutapi.IsManaged, and
// lib.rollout_opted_in is rolloutapi.IsOptedIn, for every annotation value and strategy.
func TestRegoManagedIsIsManaged(t *testing.T) {
	managed := builtinQuery(t, "data.daemonguard.lib.rollout_managed == true")
	optedIn := builtinQuery(t, "data.daemonguard.lib.rollout_opted_in == true")
	for _, value := range []string{"", rolloutapi.RolloutManaged, "Managed", " managed", "true"} {
		for _, strategy := range []appsv1.DaemonSetUpdateStrategyType{"", appsv1.OnDeleteDaemonSetStrategyType, appsv1.RollingUpdateDaemonSetStrategyType, "ondelete"} {
			ds := &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default"},
				Spec:       appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: strategy}},
			}
			if value != "" {
				ds.Annotations = map[string]string{rolloutapi.AnnotationRollout: value}
			}
			if got, want := holds(t, managed, ds), rolloutapi.IsManaged(ds); got != want {
				t.Errorf("annotation %q, strategy %q: lib.rollout_managed %v, IsManaged %v", value, strategy, got, want)
			}
			if got, want := holds(t, optedIn, ds), rolloutapi.IsOptedIn(ds); got != want {
				t.Errorf("annotation %q, strategy %q: lib.rollout_opted_in %v, IsOptedIn %v", value, strategy, got, want)
			}
		}
	}
}

// The rollout_annotations policy checks every setting the controller reads: a key it did not
// know would be denied as a typo, and one it knew under another spelling would go unchecked.
func TestPolicyKnowsEveryRolloutSetting(t *testing.T) {
	q := builtinQuery(t, "data.daemonguard.policies.rollout_annotations.known")
	rs, err := q.Eval(context.Background(), rego.EvalInput(review(t, &appsv1.DaemonSet{})))
	if err != nil || len(rs) != 1 {
		t.Fatalf("known: %v %v", rs, err)
	}
	known, ok := rs[0].Expressions[0].Value.(map[string]any)
	if !ok {
		t.Fatalf("known is %T, want an object", rs[0].Expressions[0].Value)
	}
	for _, key := range []string{
		rolloutapi.AnnotationRollout, rolloutapi.AnnotationMaxUnavailable, rolloutapi.AnnotationSteps, rolloutapi.AnnotationPaused,
		rolloutapi.AnnotationResume, rolloutapi.AnnotationProgressDeadline, rolloutapi.AnnotationTopologyKey,
		rolloutapi.AnnotationBake,
	} {
		if _, ok := known[key]; !ok {
			t.Errorf("rollout_annotations does not know %s", key)
		}
	}
}

// The policy bounds daemonguard.io/bake with max_bake, rolloutapi.ParseBake with MaxBake: the two
// are one bound, spelt once in each language.
func TestMaxBakeMatchesRolloutAPI(t *testing.T) {
	q := builtinQuery(t, "data.daemonguard.policies.rollout_annotations.max_bake")
	rs, err := q.Eval(context.Background(), rego.EvalInput(review(t, &appsv1.DaemonSet{})))
	if err != nil || len(rs) != 1 {
		t.Fatalf("max_bake: %v %v", rs, err)
	}
	v, ok := rs[0].Expressions[0].Value.(string)
	if !ok {
		t.Fatalf("max_bake is %T, want a duration string", rs[0].Expressions[0].Value)
	}
	if d, err := time.ParseDuration(v); err != nil || d != rolloutapi.MaxBake {
		t.Errorf("rollout_annotations.max_bake = %q (%v, %v), rolloutapi.MaxBake = %v", v, d, err, rolloutapi.MaxBake)
	}
}
