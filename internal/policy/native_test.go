package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// --- the Rego reference -------------------------------------------------------------------

// builtinQueries are the two queries Set evaluates, prepared on the embedded built-in modules:
// the violations of every policy, and the inject decision. OPA memoizes function calls within
// one evaluation, which shows in messages, so the two stay apart as in Set.
type builtinQueries struct {
	validate, inject rego.PreparedEvalQuery
}

func prepareBuiltin(t testing.TB, store storage.Store) builtinQueries {
	t.Helper()
	modules, _, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	prepare := func(query string) rego.PreparedEvalQuery {
		opts := []func(*rego.Rego){rego.Query(query), rego.Store(store), rego.StrictBuiltinErrors(true), rego.SetRegoVersion(ast.RegoV1)}
		for _, m := range modules {
			opts = append(opts, rego.Module(m.Name, m.Source))
		}
		q, err := rego.New(opts...).PrepareForEval(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	return builtinQueries{
		validate: prepare("violations = {name: v | v := data.daemonguard.policies[name].violation}"),
		inject:   prepare("decision = data.daemonguard.inject.decision"),
	}
}

// evalOne evaluates one of the queries on in and returns the binding of name.
func evalOne(q rego.PreparedEvalQuery, name string, in *Input, evalOpts ...rego.EvalOption) (any, error) {
	input, err := in.value()
	if err != nil {
		return nil, fmt.Errorf("build input: %w", err)
	}
	rs, err := q.Eval(context.Background(), append(evalOpts, rego.EvalParsedInput(input))...)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("%d results", len(rs))
	}
	return rs[0].Bindings[name], nil
}

// violations returns the sorted [field, msg] pairs of each policy.
func (q builtinQueries) violations(in *Input, evalOpts ...rego.EvalOption) (map[string][][2]string, error) {
	v, err := evalOne(q.validate, "violations", in, evalOpts...)
	if err != nil {
		return nil, err
	}
	out := map[string][][2]string{}
	byPolicy, _ := v.(map[string]any)
	for policy, set := range byPolicy {
		items, _ := set.([]any)
		pairs := [][2]string{}
		for _, item := range items {
			obj, _ := item.(map[string]any)
			field, _ := obj["field"].(string)
			msg, ok := obj["msg"].(string)
			if !ok {
				return nil, fmt.Errorf("policy %s: violation %v has no string msg", policy, item)
			}
			pairs = append(pairs, [2]string{field, msg})
		}
		slices.SortFunc(pairs, comparePairs)
		out[policy] = pairs
	}
	return out, nil
}

// decision returns the inject decision after Set.Inject's JSON round trip.
func (q builtinQueries) decision(in *Input, evalOpts ...rego.EvalOption) (d InjectDecision, roundTrip, err error) {
	v, err := evalOne(q.inject, "decision", in, evalOpts...)
	if err != nil {
		return InjectDecision{}, nil, err
	}
	d, roundTrip = roundTripDecision(v)
	return d, roundTrip, nil
}

// regoReference evaluates the built-in policies with OPA for any parameters: the parameters are
// written into the store inside the evaluation's transaction, converted as Compile's store
// converts them. Not safe for concurrent use.
type regoReference struct {
	store   storage.Store
	queries builtinQueries
}

// regoAnswer is what OPA says of one input: the violations of each policy as sorted
// [field, msg] pairs (or the error of their query), and the inject decision after Set.Inject's
// JSON round trip (or the error of its query or of the round trip).
type regoAnswer struct {
	violations  map[string][][2]string
	validateErr error
	decision    InjectDecision
	injectErr   error
}

func newRegoReference(t testing.TB) *regoReference {
	store := inmem.NewFromObjectWithOpts(map[string]any{"daemonguard": map[string]any{"parameters": map[string]any{}}}, inmem.OptReturnASTValuesOnRead(true))
	return &regoReference{store: store, queries: prepareBuiltin(t, store)}
}

func (r *regoReference) eval(in *Input, params map[string]any) (regoAnswer, error) {
	ctx := context.Background()
	txn, err := r.store.NewTransaction(ctx, storage.WriteParams)
	if err != nil {
		return regoAnswer{}, err
	}
	defer r.store.Abort(ctx, txn)
	if params == nil {
		params = map[string]any{}
	}
	if err := r.store.Write(ctx, txn, storage.ReplaceOp, storage.MustParsePath("/daemonguard/parameters"), params); err != nil {
		return regoAnswer{}, fmt.Errorf("write parameters: %w", err)
	}
	var a regoAnswer
	a.validateErr = recovered(func() (err error) {
		a.violations, err = r.queries.violations(in, rego.EvalTransaction(txn))
		return err
	})
	a.injectErr = recovered(func() (err error) {
		var roundTrip error
		if a.decision, roundTrip, err = r.queries.decision(in, rego.EvalTransaction(txn)); err == nil {
			err = roundTrip
		}
		return err
	})
	return a, nil
}

// recovered runs f and returns its error, or its panic as an error: OPA panics on some values no
// JSON decoder produces (NaN, json.Number("abc")), and native must decline those as it declines
// an error.
func recovered(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}

// roundTripDecision is Set.Inject's conversion of the decision.
func roundTripDecision(v any) (InjectDecision, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return InjectDecision{}, err
	}
	var d InjectDecision
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err = dec.Decode(&d)
	return d, err
}

// newRegoOnly prepares the built-in policies with OPA only, as Compile prepared them before the
// native evaluator: one store holding the parameters. The benchmarks compare native with it.
func newRegoOnly(t testing.TB, params map[string]any) builtinQueries {
	store := inmem.NewFromObjectWithOpts(map[string]any{"daemonguard": map[string]any{"parameters": params}}, inmem.OptReturnASTValuesOnRead(true))
	return prepareBuiltin(t, store)
}

func comparePairs(a, b [2]string) int {
	if c := strings.Compare(a[0], b[0]); c != 0 {
		return c
	}
	return strings.Compare(a[1], b[1])
}

func pairsOf(vs []Violation) [][2]string {
	pairs := [][2]string{}
	for _, v := range vs {
		pairs = append(pairs, [2]string{v.Field, v.Message})
	}
	slices.SortFunc(pairs, comparePairs)
	return pairs
}

// nativeReport is one comparison of native with Rego.
type nativeReport struct {
	answered, declined int // policy evaluations and inject decisions
	mismatches         []string
}

// compareWithRego evaluates in with native and with Rego and reports every answer of native that
// differs from Rego's.
func compareWithRego(ref *regoReference, in *Input, params map[string]any) nativeReport {
	var rep nativeReport
	want, err := ref.eval(in, params)
	if err != nil {
		// Parameters OPA cannot hold (Compile fails on them): native must not answer either.
		want = regoAnswer{validateErr: err, injectErr: err}
	}
	n := newNative(params)
	for _, policy := range nativePolicyNames {
		vs, ok := n.violations(policy, in)
		if !ok {
			rep.declined++
			continue
		}
		rep.answered++
		if want.validateErr != nil {
			rep.mismatches = append(rep.mismatches, fmt.Sprintf("%s: native answered %q, Rego failed: %v", policy, pairsOf(vs), want.validateErr))
			continue
		}
		for _, v := range vs {
			if v.Policy != policy || v.Action != "" {
				rep.mismatches = append(rep.mismatches, fmt.Sprintf("%s: violation %+v: want policy %s and no action", policy, v, policy))
			}
		}
		got := pairsOf(vs)
		if len(slices.CompactFunc(slices.Clone(got), func(a, b [2]string) bool { return a == b })) != len(got) {
			rep.mismatches = append(rep.mismatches, fmt.Sprintf("%s: native repeats a violation: %q", policy, got))
		}
		if !reflect.DeepEqual(got, want.violations[policy]) {
			rep.mismatches = append(rep.mismatches, fmt.Sprintf("%s:\n native %q\n rego   %q", policy, got, want.violations[policy]))
		}
	}
	d, ok := n.inject(in)
	if !ok {
		rep.declined++
		return rep
	}
	rep.answered++
	switch {
	case want.injectErr != nil:
		rep.mismatches = append(rep.mismatches, fmt.Sprintf("inject: native answered %+v, Set.Inject fails: %v", d, want.injectErr))
	case !reflect.DeepEqual(d, want.decision):
		rep.mismatches = append(rep.mismatches, fmt.Sprintf("inject:\n native %s\n rego   %s", describeDecision(d), describeDecision(want.decision)))
	}
	return rep
}

func describeDecision(d InjectDecision) string {
	s := fmt.Sprintf("%+v", d)
	for _, t := range d.Tolerations {
		if t.TolerationSeconds != nil {
			s += fmt.Sprintf(" tolerationSeconds=%d", *t.TolerationSeconds)
		}
	}
	if d.Tolerations != nil && len(d.Tolerations) == 0 {
		s += " (empty tolerations)"
	}
	return s
}

// describeCase prints an input and parameters for a failure message.
func describeCase(in *Input, params map[string]any) string {
	show := func(v any) string {
		if b, err := json.Marshal(v); err == nil {
			return string(b)
		}
		return fmt.Sprintf("%#v", v)
	}
	return fmt.Sprintf("operation %s namespace %s %v cluster %+v\nobject %s\noldObject %s\nparams %s",
		in.Operation, in.Namespace.Name, in.Namespace.Labels, in.Cluster, show(in.Object), show(in.OldObject), show(params))
}

// builtinParams returns a fresh copy of the default parameters (numbers stay float64, as
// parameters.yaml gives them).
var builtinParams = func() func() map[string]any {
	raw := sync.OnceValue(func() []byte {
		_, params, err := Builtin()
		if err != nil {
			panic(err)
		}
		raw, err := json.Marshal(params)
		if err != nil {
			panic(err)
		}
		return raw
	})
	return func() map[string]any {
		var params map[string]any
		if err := json.Unmarshal(raw(), &params); err != nil {
			panic(err)
		}
		return params
	}
}()

// decodeJSON decodes a JSON object as the webhook does (numbers as json.Number).
func decodeObjectJSON(t testing.TB, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("decode %s: %v", s, err)
	}
	return obj
}

// --- hand-written cases -------------------------------------------------------------------

// dsOption changes a DaemonSet fixture.
type dsOption func(ds map[string]any)

// daemonSetFixture is a compliant DaemonSet (numbers as json.Number), changed by opts.
func daemonSetFixture(opts ...dsOption) map[string]any {
	ds := map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "DaemonSet",
		"metadata":   map[string]any{"name": "agent", "namespace": "team-a", "labels": map[string]any{"app": "agent"}},
		"spec": map[string]any{
			"selector":       map[string]any{"matchLabels": map[string]any{"app": "agent"}},
			"updateStrategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": json.Number("1")}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "agent"}},
				"spec": map[string]any{"containers": []any{map[string]any{
					"name": "agent", "image": "example.com/agent:1.0",
					"ports": []any{map[string]any{"containerPort": json.Number("8080"), "protocol": "TCP"}},
				}}},
			},
		},
	}
	for _, o := range opts {
		o(ds)
	}
	return ds
}

// at returns the object at path below ds, creating objects on the way.
func objectAt(ds map[string]any, path ...string) map[string]any {
	m := ds
	for _, k := range path {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	return m
}

func withAnnotation(key string, value any) dsOption {
	return func(ds map[string]any) { objectAt(ds, "metadata", "annotations")[key] = value }
}

func withLabel(key string, value any) dsOption {
	return func(ds map[string]any) { objectAt(ds, "metadata", "labels")[key] = value }
}

func withStrategyType(t any) dsOption {
	return func(ds map[string]any) { objectAt(ds, "spec", "updateStrategy")["type"] = t }
}

func withoutStrategyType() dsOption {
	return func(ds map[string]any) { delete(objectAt(ds, "spec", "updateStrategy"), "type") }
}

func withRolling(key string, value any) dsOption {
	return func(ds map[string]any) { objectAt(ds, "spec", "updateStrategy", "rollingUpdate")[key] = value }
}

func withoutRolling(key string) dsOption {
	return func(ds map[string]any) { delete(objectAt(ds, "spec", "updateStrategy", "rollingUpdate"), key) }
}

func withSpec(key string, value any) dsOption {
	return func(ds map[string]any) { objectAt(ds, "spec")[key] = value }
}

func withPodSpec(key string, value any) dsOption {
	return func(ds map[string]any) { objectAt(ds, "spec", "template", "spec")[key] = value }
}

func withPort(port map[string]any) dsOption {
	return func(ds map[string]any) {
		c := objectAt(ds, "spec", "template", "spec")["containers"].([]any)[0].(map[string]any)
		c["ports"] = append(c["ports"].([]any), port)
	}
}

type paramsOption func(p map[string]any)

// withParam sets the value at path in the parameters, creating objects on the way.
func withParam(value any, path ...string) paramsOption {
	return func(p map[string]any) { objectAt(p, path[:len(path)-1]...)[path[len(path)-1]] = value }
}

const wantBudgetHint = `a non-negative integer (e.g. 1) or a percentage string "N%" with N from 0 to 100 (e.g. "10%")`

func TestNativeCasesMatchRego(t *testing.T) {
	ref := newRegoReference(t)
	type testCase struct {
		ds        map[string]any
		namespace string // "team-a" unless set
		labels    map[string]string
		cluster   *ClusterFacts
		params    []paramsOption
		policy    string   // the policy whose messages are spelled out ("inject" for the decision)
		want      []string // the policy's messages, in any order; nil: only compare with Rego
		decision  *InjectDecision
		declined  bool // native must decline the policy (or the decision)
	}
	tolerations := []corev1.Toleration{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	cases := map[string]testCase{
		// rolling_update_budget
		"a compliant budget has no violation": {
			ds: daemonSetFixture(), policy: "rolling_update_budget", want: []string{},
		},
		"a malformed maxUnavailable is quoted": {
			ds: daemonSetFixture(withRolling("maxUnavailable", "abc")), policy: "rolling_update_budget",
			want: []string{`maxUnavailable "abc" is not valid: it must be ` + wantBudgetHint},
		},
		"a fractional maxUnavailable is printed as sprintf's %v prints it": {
			ds: daemonSetFixture(withRolling("maxUnavailable", json.Number("1.5"))), policy: "rolling_update_budget",
			want: []string{`maxUnavailable 1.5 is not valid: it must be ` + wantBudgetHint},
		},
		"an object maxUnavailable is printed as Rego prints objects": {
			ds: daemonSetFixture(withRolling("maxUnavailable", map[string]any{"b": json.Number("1.5"), "a": []any{"x", nil, true}})), policy: "rolling_update_budget",
			want: []string{`maxUnavailable {"a": ["x", null, true], "b": 1.5} is not valid: it must be ` + wantBudgetHint},
		},
		"a negative maxSurge is not valid": {
			ds: daemonSetFixture(withRolling("maxSurge", json.Number("-1"))), policy: "rolling_update_budget",
			want: []string{`maxSurge -1 is not valid: it must be ` + wantBudgetHint},
		},
		"150% is not valid": {
			ds: daemonSetFixture(withRolling("maxUnavailable", "150%")), policy: "rolling_update_budget",
			want: []string{`maxUnavailable "150%" is not valid: it must be ` + wantBudgetHint},
		},
		"a zero budget names the defaulted maxSurge": {
			ds: daemonSetFixture(withRolling("maxUnavailable", "0%")), policy: "rolling_update_budget",
			want: []string{`maxUnavailable "0%" and maxSurge 0 (the default) are both zero, so no pod could ever be updated: set maxUnavailable to at least 1 (or maxSurge above 0 when no container uses a hostPort)`},
		},
		"surging with the defaulted maxUnavailable": {
			ds: daemonSetFixture(withoutRolling("maxUnavailable"), withRolling("maxSurge", "25%")), policy: "rolling_update_budget",
			want: []string{`maxSurge "25%" may not be set while maxUnavailable 1 (the default) is non-zero: exactly one of them must be non-zero; to surge, set maxUnavailable to 0`},
		},
		"surging with a host port": {
			ds: daemonSetFixture(withRolling("maxUnavailable", json.Number("0")), withRolling("maxSurge", json.Number("1")),
				withPort(map[string]any{"containerPort": json.Number("9100"), "hostPort": json.Number("9100")})),
			policy: "rolling_update_budget",
			want:   []string{`maxSurge 1 must be 0 because the pod binds host ports (container "agent" hostPort 9100): a surge pod can never start next to the old pod on the same node, so the rollout would hang; use maxSurge 0 and maxUnavailable of at least 1`},
		},
		"under hostNetwork every containerPort is a host port": {
			ds:     daemonSetFixture(withRolling("maxUnavailable", json.Number("0")), withRolling("maxSurge", "10%"), withPodSpec("hostNetwork", true)),
			policy: "rolling_update_budget",
			want:   []string{`maxSurge "10%" must be 0 because the pod binds host ports (container "agent" hostPort 8080): a surge pod can never start next to the old pod on the same node, so the rollout would hang; use maxSurge 0 and maxUnavailable of at least 1`},
		},
		"a percentage above the class maximum": {
			ds: daemonSetFixture(withRolling("maxUnavailable", "60%")), policy: "rolling_update_budget",
			want: []string{`maxUnavailable "60%" exceeds the allowed maximum of 50% for namespace class "default" (allowed: 0% to 50%, or an integer node count)`},
		},
		"kube-system is in the class system": {
			ds: daemonSetFixture(withRolling("maxUnavailable", "30%")), namespace: "kube-system", policy: "rolling_update_budget",
			want: []string{`maxUnavailable "30%" exceeds the allowed maximum of 25% for namespace class "system" (allowed: 0% to 25%, or an integer node count)`},
		},
		"an integer above the allowed node count": {
			ds: daemonSetFixture(withRolling("maxUnavailable", json.Number("3"))), cluster: &ClusterFacts{Nodes: 5, MatchingNodes: 5},
			policy: "rolling_update_budget",
			want:   []string{`maxUnavailable 3 exceeds the allowed maximum of 2 for namespace class "default": the DaemonSet runs on 5 matching nodes and at most 50% of them (at least 1) may be unavailable at once (allowed: 0 to 2, or a percentage up to 50%)`},
		},
		"one node may always be unavailable": {
			ds: daemonSetFixture(), cluster: &ClusterFacts{Nodes: 1, MatchingNodes: 1}, policy: "rolling_update_budget", want: []string{},
		},
		"OnDelete has no budget": {
			ds: daemonSetFixture(withStrategyType("OnDelete"), withRolling("maxUnavailable", "abc")), policy: "rolling_update_budget", want: []string{},
		},
		"a string maxUnavailablePercent skips the bound": {
			ds: daemonSetFixture(withRolling("maxUnavailable", "90%")), params: []paramsOption{withParam("50", "policies", "rolling_update_budget", "default", "maxUnavailablePercent")},
			policy: "rolling_update_budget", want: []string{},
		},
		"a fractional maxUnavailablePercent is printed as %v prints it": {
			ds: daemonSetFixture(withRolling("maxUnavailable", "13%")), params: []paramsOption{withParam(12.5, "policies", "rolling_update_budget", "default", "maxUnavailablePercent")},
			policy: "rolling_update_budget",
			want:   []string{`maxUnavailable "13%" exceeds the allowed maximum of 12.5% for namespace class "default" (allowed: 0% to 12.5%, or an integer node count)`},
		},
		"a fractional maxUnavailablePercent with a node count is declined": {
			ds: daemonSetFixture(), cluster: &ClusterFacts{Nodes: 9, MatchingNodes: 9},
			params: []paramsOption{withParam(12.5, "policies", "rolling_update_budget", "default", "maxUnavailablePercent")},
			policy: "rolling_update_budget", declined: true,
		},
		"a node budget that overflows is declined": {
			ds: daemonSetFixture(withRolling("maxUnavailable", json.Number("3"))), cluster: &ClusterFacts{Nodes: 1 << 40, MatchingNodes: 1 << 40},
			params: []paramsOption{withParam(int64(1)<<53, "policies", "rolling_update_budget", "default", "maxUnavailablePercent")},
			policy: "rolling_update_budget", declined: true,
		},
		"a maxUnavailable beyond 2^53 is declined": {
			ds: daemonSetFixture(withRolling("maxUnavailable", json.Number("1e30"))), policy: "rolling_update_budget", declined: true,
		},
		"a number Rego cannot convert is declined even where no policy looks": {
			ds: daemonSetFixture(withSpec("unknown", json.Number("1e99999"))), policy: "rolling_update_budget", declined: true,
		},
		"a Go type Rego converts by a JSON round trip is declined": {
			ds: daemonSetFixture(withSpec("unknown", map[string]string{"a": "b"})), policy: "rolling_update_budget", declined: true,
		},

		// on_delete_managed
		"OnDelete without the rollout controller": {
			ds: daemonSetFixture(withStrategyType("OnDelete")), policy: "on_delete_managed",
			want: []string{`updateStrategy.type "OnDelete" is not managed by daemonguard: nothing will roll the pods out after a template change, they keep running the old revision until deleted by hand; add the annotation daemonguard.io/rollout: "managed" to let daemonguard's rollout controller roll them out, or daemonguard.io/on-delete-exempt: "<reason>" if manual replacement is intended`},
		},
		"OnDelete with a blank exemption": {
			ds: daemonSetFixture(withStrategyType("OnDelete"), withAnnotation("daemonguard.io/on-delete-exempt", " \t")), policy: "on_delete_managed",
		},
		"OnDelete exempt": {
			ds: daemonSetFixture(withStrategyType("OnDelete"), withAnnotation("daemonguard.io/on-delete-exempt", "manual")), policy: "on_delete_managed", want: []string{},
		},
		"managed with the defaulted type": {
			ds: daemonSetFixture(withoutStrategyType(), withAnnotation("daemonguard.io/rollout", "managed")), policy: "on_delete_managed",
			want: []string{`updateStrategy.type "RollingUpdate" (the default) is not allowed with the annotation daemonguard.io/rollout: "managed": the built-in DaemonSet controller would roll the pods itself and fight daemonguard's rollout controller; the only allowed type is "OnDelete"`},
		},
		"managed with a number for a type": {
			ds: daemonSetFixture(withStrategyType(json.Number("5")), withAnnotation("daemonguard.io/rollout", "managed")), policy: "on_delete_managed",
			want: []string{`updateStrategy.type 5 is not allowed with the annotation daemonguard.io/rollout: "managed": the built-in DaemonSet controller would roll the pods itself and fight daemonguard's rollout controller; the only allowed type is "OnDelete"`},
		},
		"a null type is the default": {
			ds: daemonSetFixture(withStrategyType(nil), withAnnotation("daemonguard.io/rollout", "managed")), policy: "on_delete_managed",
		},

		// revision_history
		"the Kubernetes defaults are within range": {
			ds: daemonSetFixture(), policy: "revision_history", want: []string{},
		},
		"a revision history below the minimum": {
			ds: daemonSetFixture(withSpec("revisionHistoryLimit", json.Number("1"))), policy: "revision_history",
			want: []string{"revisionHistoryLimit 1 is below the allowed minimum of 2 for namespace class \"default\" (allowed: an integer from 2 to 20): `kubectl rollout undo` needs old revisions to go back to"},
		},
		"a float64 that prints in exponent form is declined": {
			// Printed "1e+06" here, but as "1000000" when an equal value was printed first.
			ds: daemonSetFixture(withSpec("revisionHistoryLimit", 1e6)), policy: "revision_history", declined: true,
		},
		"-0 is declined": {
			// lib.quote(0) of the defaulted maxSurge is "-0" after lib.quote(-0.0).
			ds: daemonSetFixture(withRolling("maxUnavailable", json.Number("-0.0"))), policy: "rolling_update_budget", declined: true,
		},
		"a number written oddly where no message shows a number is answered": {
			ds: daemonSetFixture(withSpec("unknown", json.Number("1.0")), withRolling("maxUnavailable", "abc")), policy: "rolling_update_budget",
			want: []string{`maxUnavailable "abc" is not valid: it must be ` + wantBudgetHint},
		},
		"a number written oddly anywhere in the spec declines a message showing a number": {
			ds: daemonSetFixture(withSpec("unknown", json.Number("1.0")), withRolling("maxUnavailable", json.Number("-1"))), policy: "rolling_update_budget", declined: true,
		},
		"a number written oddly in the status does not matter": {
			ds:     daemonSetFixture(func(ds map[string]any) { ds["status"] = map[string]any{"numberReady": json.Number("1e3")} }, withRolling("maxUnavailable", json.Number("-1"))),
			policy: "rolling_update_budget", want: []string{`maxUnavailable -1 is not valid: it must be ` + wantBudgetHint},
		},
		"a large canonical limit": {
			ds: daemonSetFixture(withSpec("revisionHistoryLimit", json.Number("1000000"))), policy: "revision_history",
			want: []string{`revisionHistoryLimit 1000000 exceeds the allowed maximum of 20 for namespace class "default" (allowed: an integer from 2 to 20): every kept revision is a ControllerRevision object stored in etcd`},
		},
		"the defaulted limit against a class minimum": {
			ds: daemonSetFixture(), params: []paramsOption{withParam(11.0, "policies", "revision_history", "default", "minRevisionHistoryLimit")}, policy: "revision_history",
			want: []string{"revisionHistoryLimit 10 (the default) is below the allowed minimum of 11 for namespace class \"default\" (allowed: an integer from 11 to 20): `kubectl rollout undo` needs old revisions to go back to"},
		},
		"a string limit": {
			ds: daemonSetFixture(withSpec("revisionHistoryLimit", "10")), policy: "revision_history",
			want: []string{`revisionHistoryLimit "10" is not a non-negative integer (allowed: an integer from 2 to 20)`},
		},
		"a malformed minimum drops out of the range": {
			ds:     daemonSetFixture(withSpec("revisionHistoryLimit", json.Number("-3"))),
			params: []paramsOption{withParam("2", "policies", "revision_history", "default", "minRevisionHistoryLimit")}, policy: "revision_history",
			want: []string{`revisionHistoryLimit -3 is not a non-negative integer (allowed: an integer of at most 20)`},
		},
		"minReadySeconds below the class minimum": {
			ds: daemonSetFixture(withSpec("minReadySeconds", json.Number("5"))), params: []paramsOption{withParam(10.0, "policies", "revision_history", "default", "minReadySeconds")},
			policy: "revision_history",
			want:   []string{`minReadySeconds 5 is below the allowed minimum of 10 for namespace class "default" (allowed: 10 or more): a new pod must stay ready that long before the rollout moves on to the next nodes`},
		},
		"a fractional minReadySeconds": {
			ds: daemonSetFixture(withSpec("minReadySeconds", json.Number("0.5"))), policy: "revision_history",
			want: []string{`minReadySeconds 0.5 is not a non-negative integer (allowed: an integer of at least 0)`},
		},

		// rollout_annotations
		"well-formed annotations": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/rollout", "managed"), withAnnotation("daemonguard.io/steps", "1, pause:5m,25%,pause,100%"),
				withAnnotation("daemonguard.io/progress-deadline", "1.5h"), withAnnotation("daemonguard.io/topology-key", "topology.kubernetes.io/zone"),
				withAnnotation("status.daemonguard.io/progress", "x")),
			policy: "rollout_annotations", want: []string{},
		},
		"an unknown annotation": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/rolout", "managed")), policy: "rollout_annotations",
			want: []string{`unknown daemonguard annotation "daemonguard.io/rolout" (a typo?); known annotations: daemonguard.io/inject, daemonguard.io/max-unavailable, daemonguard.io/on-delete-exempt, daemonguard.io/paused, daemonguard.io/progress-deadline, daemonguard.io/resume, daemonguard.io/rollout, daemonguard.io/steps, daemonguard.io/topology-key`},
		},
		"an annotation that is not a string": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/paused", true)), policy: "rollout_annotations",
			want: []string{`value true is not a string: annotation values are strings, quote it in YAML`},
		},
		"a progress deadline below the minimum": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/progress-deadline", "29.4s")), policy: "rollout_annotations",
			want: []string{`value "29.4s" is not allowed: it must be a Go duration from 30s to 8760h (e.g. "10m", "1h30m")`},
		},
		"a deadline rounds to whole nanoseconds": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/progress-deadline", "29.9999999999s")), policy: "rollout_annotations", want: []string{},
		},
		"a progress deadline of a year": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/progress-deadline", "8760h")), policy: "rollout_annotations", want: []string{},
		},
		"a progress deadline in days": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/progress-deadline", "1d")), policy: "rollout_annotations",
		},
		"steps that decrease and never finish": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/steps", "2,pause:1.5h,50%,1,25%")), policy: "rollout_annotations",
			want: []string{
				`step 4 "1" of "2,pause:1.5h,50%,1,25%" is smaller than step 1 "2": count steps must not decrease`,
				`step 5 "25%" of "2,pause:1.5h,50%,1,25%" is smaller than step 3 "50%": percent steps must not decrease`,
				`value "2,pause:1.5h,50%,1,25%" does not end with "100%": the rollout would never finish; make "100%" the last step that is not a pause (e.g. "2,pause:1.5h,50%,1,25%,100%")`,
			},
		},
		"invalid steps": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/steps", "0,101%,pause:0s,pause:-5m,pause:5µs,100%")), policy: "rollout_annotations",
		},
		"an empty list of steps": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/steps", " ")), policy: "rollout_annotations",
			want: []string{`value " " is an empty list: list at least one step, ending with "100%" (e.g. "1,25%,100%")`},
		},
		"steps with trailing commas": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/steps", "1,pause,,")), policy: "rollout_annotations",
		},
		"resume tokens count characters": {
			ds:     daemonSetFixture(withAnnotation("daemonguard.io/resume", strings.Repeat("é", 63)), withAnnotation("daemonguard.io/max-unavailable", "007%")),
			policy: "rollout_annotations", want: []string{},
		},
		"a class with its own progress deadline": {
			ds:        daemonSetFixture(withAnnotation("daemonguard.io/progress-deadline", "1m")),
			namespace: "kube-system", params: []paramsOption{withParam(90.5, "policies", "rollout_annotations", "system", "minProgressDeadlineSeconds")},
			policy: "rollout_annotations",
			want:   []string{`value "1m" is not allowed: it must be a Go duration from 90.5s to 8760h (e.g. "10m", "1h30m")`},
		},

		// inject
		"the default injection": {
			ds: daemonSetFixture(), policy: "inject",
			decision: &InjectDecision{Inject: true, Tolerations: tolerations, PriorityClassName: "system-node-critical"},
		},
		"opting out": {
			ds: daemonSetFixture(withAnnotation("daemonguard.io/inject", "false")), policy: "inject",
			decision: &InjectDecision{Reason: `the DaemonSet opts out with the annotation daemonguard.io/inject: "false"`},
		},
		"injection disabled for a class matched by labels": {
			ds: daemonSetFixture(), labels: map[string]string{"tier": "platform"}, policy: "inject",
			params: []paramsOption{
				withParam([]any{map[string]any{"name": "platform", "matchLabels": map[string]any{"tier": "platform"}}}, "namespaceClasses"),
				withParam(false, "inject", "namespaceClasses", "platform", "enabled"),
			},
			decision: &InjectDecision{Reason: `injection is disabled (inject.enabled: false) for namespace class "platform"`},
		},
		"an excluded namespace": {
			ds: daemonSetFixture(), policy: "inject", params: []paramsOption{withParam([]any{"team-a"}, "inject", "excludedNamespaces")},
			decision: &InjectDecision{Reason: `namespace "team-a" is in inject.excludedNamespaces`},
		},
		"excluded labels": {
			ds: daemonSetFixture(withLabel("tier", "edge")), policy: "inject",
			params:   []paramsOption{withParam(map[string]any{"tier": "edge", "app": "agent"}, "inject", "excludedLabels")},
			decision: &InjectDecision{Reason: `the DaemonSet's labels match inject.excludedLabels {"app": "agent", "tier": "edge"}`},
		},
		"no priority class and no tolerations": {
			ds: daemonSetFixture(), policy: "inject",
			params:   []paramsOption{withParam("", "inject", "priorityClassName"), withParam([]any{"not an object"}, "inject", "tolerations")},
			decision: &InjectDecision{Reason: "nothing to inject: inject.tolerations is empty and inject.priorityClassName is empty"},
		},
		"tolerations only": {
			ds: daemonSetFixture(), policy: "inject",
			params: []paramsOption{withParam("", "inject", "namespaceClasses", "default", "priorityClassName"),
				withParam([]any{map[string]any{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 300.0}}, "inject", "tolerations")},
			decision: &InjectDecision{Inject: true, Tolerations: []corev1.Toleration{{Key: "k", Operator: "Equal", Value: "v", Effect: "NoExecute", TolerationSeconds: pointerTo(int64(300))}}},
		},
		"a toleration Set.Inject cannot decode is declined": {
			ds: daemonSetFixture(), policy: "inject",
			params: []paramsOption{withParam([]any{map[string]any{"key": "k", "tolerationSeconds": 1.5}}, "inject", "tolerations")}, declined: true,
		},
		"a toleration with an unknown field, even a null one, is declined": {
			ds: daemonSetFixture(), policy: "inject",
			params: []paramsOption{withParam([]any{map[string]any{"key": "k", "operator": "Exists", "bogus": nil}}, "inject", "tolerations")}, declined: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			params := builtinParams()
			for _, o := range tc.params {
				o(params)
			}
			ns := tc.namespace
			if ns == "" {
				ns = "team-a"
			}
			in := &Input{Operation: OpCreate, Object: tc.ds, Namespace: Namespace{Name: ns, Labels: tc.labels}, Cluster: tc.cluster}
			rep := compareWithRego(ref, in, params)
			for _, m := range rep.mismatches {
				t.Error(m)
			}
			n := newNative(params)
			if tc.policy == "inject" {
				d, ok := n.inject(in)
				switch {
				case ok == tc.declined:
					t.Errorf("native answered %v, want %v", ok, !tc.declined)
				case tc.decision != nil && !reflect.DeepEqual(d, *tc.decision):
					t.Errorf("decision %s, want %s", describeDecision(d), describeDecision(*tc.decision))
				}
				return
			}
			vs, ok := n.violations(tc.policy, in)
			if ok == tc.declined {
				t.Fatalf("native answered %v, want %v", ok, !tc.declined)
			}
			if tc.want == nil || !ok {
				return
			}
			var got []string
			for _, v := range vs {
				got = append(got, v.Message)
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Errorf("messages\n%q\nwant\n%q", got, want)
			}
		})
	}
}

func pointerTo[T any](v T) *T { return &v }

// --- helpers against their Rego counterparts ------------------------------------------------

// The fast integer path of durationNs agrees with the replay of topdown's arithmetic.
func TestNativeDurationFastPathMatchesRegoArithmetic(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	g := &caseGen{r: r}
	for range 5000 {
		s := g.duration()
		ns, ok := durationNs(s)
		if !ok || strings.ContainsAny(s, ".") {
			continue
		}
		if rego := durationNsRego(s); rego != ns {
			t.Errorf("durationNs(%q) = %d, Rego's arithmetic gives %d", s, ns, rego)
		}
	}
}

// --- the property test ----------------------------------------------------------------------

// TestNativeMatchesRegoOnRandomCases compares native with Rego on random inputs and parameters.
// Every answer native gives must be Rego's; typical inputs (see caseGen) must all be answered.
func TestNativeMatchesRegoOnRandomCases(t *testing.T) {
	cases := 20000
	if testing.Short() {
		cases = 2000
	}
	if n, err := strconv.Atoi(os.Getenv("NATIVE_CASES")); err == nil {
		cases = n
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("NATIVE_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (set NATIVE_SEED to repeat, NATIVE_CASES for more cases)", seed)
	const workers = 2
	type result struct {
		nativeReport
		typicalDeclined []string
		total, typical  int
	}
	results := make([]result, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ref := newRegoReference(t)
			r := rand.New(rand.NewSource(seed + int64(w)))
			res := &results[w]
			for range cases / workers {
				g := &caseGen{r: r, odd: r.Intn(3) == 0}
				in, params := g.nativeCase()
				rep := compareWithRego(ref, &in, params)
				res.total++
				res.answered += rep.answered
				res.declined += rep.declined
				for _, m := range rep.mismatches {
					if len(res.mismatches) < 5 {
						res.mismatches = append(res.mismatches, m+"\n"+describeCase(&in, params))
					}
				}
				if !g.mayDecline {
					res.typical++
					if rep.declined > 0 && len(res.typicalDeclined) < 5 {
						res.typicalDeclined = append(res.typicalDeclined, describeCase(&in, params))
					}
				}
			}
		}()
	}
	wg.Wait()
	var total, typical, answered, declined int
	for _, res := range results {
		total += res.total
		typical += res.typical
		answered += res.answered
		declined += res.declined
		for _, m := range res.mismatches {
			t.Error("native differs from Rego: " + m)
		}
		for _, c := range res.typicalDeclined {
			t.Error("native declined a typical input: " + c)
		}
	}
	t.Logf("%d cases (%d typical): %d answers by native, %d declined (%.2f%%)", total, typical, answered, declined, 100*float64(declined)/float64(answered+declined))
}

// --- the repository's manifests -------------------------------------------------------------

// testdataDocuments returns every YAML document under the repository's testdata/ as JSON.
func testdataDocuments(t testing.TB) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{}
	err := filepath.WalkDir(filepath.Join("..", "..", "testdata"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, doc := range strings.Split(string(data), "\n---") {
			raw, err := yaml.YAMLToJSON([]byte(doc))
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if string(raw) != "null" {
				docs[fmt.Sprintf("%s#%d", path, i)] = raw
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) < 40 {
		t.Fatalf("found %d documents under testdata/, expected the repository's manifests", len(docs))
	}
	return docs
}

// Every manifest of the repository is answered natively, as Rego answers it; and the Rego
// reference of these tests (parameters written per evaluation) answers as a store built once
// from the parameters, as Compile builds it, does.
func TestNativeHandlesTestdataManifests(t *testing.T) {
	ref := newRegoReference(t)
	params := builtinParams()
	plain := newRegoOnly(t, params)
	docs := testdataDocuments(t)
	docs["apiServerDaemonSet"] = []byte(apiServerDaemonSet)
	for name, raw := range docs {
		obj := decodeObjectJSON(t, string(raw))
		ns, _ := objectAt(obj, "metadata")["namespace"].(string)
		if ns == "" {
			ns = "default"
		}
		for _, cluster := range []*ClusterFacts{nil, {Nodes: 3, MatchingNodes: 3}, {Nodes: 100, MatchingNodes: 40}} {
			in := &Input{Operation: OpCreate, Object: obj, Namespace: Namespace{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}, Cluster: cluster}
			rep := compareWithRego(ref, in, params)
			for _, m := range rep.mismatches {
				t.Errorf("%s: %s", name, m)
			}
			if rep.declined > 0 {
				t.Errorf("%s (cluster %+v): native declined %d of %d answers", name, cluster, rep.declined, rep.declined+rep.answered)
			}
			want, err := ref.eval(in, params)
			if err != nil {
				t.Fatal(err)
			}
			got, err := plain.violations(in)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want.violations) {
				t.Errorf("%s: the reference says %q, a store built from the parameters %q", name, want.violations, got)
			}
			d, roundTrip, err := plain.decision(in)
			if err != nil || roundTrip != nil || !reflect.DeepEqual(d, want.decision) {
				t.Errorf("%s: the reference decides %s, a store built from the parameters %s (%v, %v)", name, describeDecision(want.decision), describeDecision(d), err, roundTrip)
			}
		}
	}
}

// --- fuzzing --------------------------------------------------------------------------------

var fuzzReference struct {
	once sync.Once
	ref  *regoReference
	mu   sync.Mutex
}

// FuzzNativeMatchesRego decodes the fuzz bytes as the object (as the webhook decodes a request's)
// and compares native with Rego on it, with parameters, namespace and node count drawn from
// paramsSeed by the random generator.
func FuzzNativeMatchesRego(f *testing.F) {
	for _, raw := range testdataDocuments(f) {
		f.Add(raw, int64(0), 3)
	}
	f.Add([]byte(apiServerDaemonSet), int64(1), 12)
	r := rand.New(rand.NewSource(1))
	for i := range 40 {
		in, _ := randomNativeCase(r)
		if raw, err := json.Marshal(in.Object); err == nil {
			f.Add(raw, int64(i), i%5)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte, paramsSeed int64, matchingNodes int) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var obj map[string]any
		if err := dec.Decode(&obj); err != nil {
			return
		}
		fuzzReference.once.Do(func() { fuzzReference.ref = newRegoReference(t) })
		fuzzReference.mu.Lock()
		defer fuzzReference.mu.Unlock()
		g := &caseGen{r: rand.New(rand.NewSource(paramsSeed)), odd: paramsSeed%3 == 0}
		in, params := g.nativeCase()
		in.Object = obj
		in.Cluster = nil
		if matchingNodes >= -1 {
			in.Cluster = &ClusterFacts{Nodes: matchingNodes, MatchingNodes: matchingNodes}
		}
		for _, m := range compareWithRego(fuzzReference.ref, &in, params).mismatches {
			t.Errorf("%s\n%s", m, describeCase(&in, params))
		}
	})
}

// --- benchmarks -----------------------------------------------------------------------------

// apiServerDaemonSet is a DaemonSet as the API server sends it to admission (about 6.7 KB).
const apiServerDaemonSet = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"annotations":{"deprecated.daemonset.template.generation":"3","meta.helm.sh/release-name":"cilium","meta.helm.sh/release-namespace":"kube-system","daemonguard.io/rollout":"managed","daemonguard.io/steps":"1,pause:5m,25%,100%"},"creationTimestamp":"2024-05-01T10:00:00Z","generation":3,"labels":{"app.kubernetes.io/managed-by":"Helm","app.kubernetes.io/name":"cilium-agent","app.kubernetes.io/part-of":"cilium","k8s-app":"cilium"},"managedFields":[{"apiVersion":"apps/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},"f:deprecated.daemonset.template.generation":{}}},"f:spec":{"f:revisionHistoryLimit":{},"f:selector":{},"f:template":{"f:metadata":{"f:labels":{".":{},"f:k8s-app":{}}}}}},"manager":"helm","operation":"Update","time":"2024-05-01T10:00:00Z"}],"name":"cilium","namespace":"kube-system","resourceVersion":"123456","uid":"0b0f5a9e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"},"spec":{"revisionHistoryLimit":10,"selector":{"matchLabels":{"k8s-app":"cilium"}},"template":{"metadata":{"annotations":{"container.apparmor.security.beta.kubernetes.io/cilium-agent":"unconfined","prometheus.io/port":"9962","prometheus.io/scrape":"true"},"creationTimestamp":null,"labels":{"app.kubernetes.io/name":"cilium-agent","app.kubernetes.io/part-of":"cilium","k8s-app":"cilium"}},"spec":{"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"labelSelector":{"matchLabels":{"k8s-app":"cilium"}},"topologyKey":"kubernetes.io/hostname"}]}},"automountServiceAccountToken":true,"containers":[{"args":["--config-dir=/tmp/cilium/config-map"],"command":["cilium-agent"],"env":[{"name":"K8S_NODE_NAME","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"spec.nodeName"}}},{"name":"CILIUM_K8S_NAMESPACE","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"metadata.namespace"}}},{"name":"CILIUM_CLUSTERMESH_CONFIG","value":"/var/lib/cilium/clustermesh/"},{"name":"GOMEMLIMIT","valueFrom":{"resourceFieldRef":{"divisor":"1","resource":"limits.memory"}}}],"image":"quay.io/cilium/cilium:v1.15.5","imagePullPolicy":"IfNotPresent","lifecycle":{"postStart":{"exec":{"command":["bash","-c","set -o errexit"]}},"preStop":{"exec":{"command":["/cni-uninstall.sh"]}}},"livenessProbe":{"failureThreshold":10,"httpGet":{"host":"127.0.0.1","httpHeaders":[{"name":"brief","value":"true"}],"path":"/healthz","port":9879,"scheme":"HTTP"},"periodSeconds":30,"successThreshold":1,"timeoutSeconds":5},"name":"cilium-agent","ports":[{"containerPort":4244,"hostPort":4244,"name":"peer-service","protocol":"TCP"},{"containerPort":9962,"hostPort":9962,"name":"prometheus","protocol":"TCP"}],"readinessProbe":{"failureThreshold":3,"httpGet":{"host":"127.0.0.1","path":"/healthz","port":9879,"scheme":"HTTP"},"periodSeconds":30,"successThreshold":1,"timeoutSeconds":5},"resources":{"limits":{"memory":"1Gi"},"requests":{"cpu":"100m","memory":"512Mi"}},"securityContext":{"capabilities":{"add":["CHOWN","KILL","NET_ADMIN","NET_RAW","IPC_LOCK","SYS_MODULE","SYS_ADMIN","SYS_RESOURCE","DAC_OVERRIDE","FOWNER","SETGID","SETUID"],"drop":["ALL"]},"seLinuxOptions":{"level":"s0","type":"spc_t"}},"startupProbe":{"failureThreshold":105,"httpGet":{"host":"127.0.0.1","path":"/healthz","port":9879,"scheme":"HTTP"},"periodSeconds":2,"successThreshold":1,"timeoutSeconds":1},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"FallbackToLogsOnError","volumeMounts":[{"mountPath":"/host/proc/sys/net","name":"host-proc-sys-net"},{"mountPath":"/host/proc/sys/kernel","name":"host-proc-sys-kernel"},{"mountPath":"/sys/fs/bpf","mountPropagation":"HostToContainer","name":"bpf-maps"},{"mountPath":"/var/run/cilium","name":"cilium-run"},{"mountPath":"/host/etc/cni/net.d","name":"etc-cni-netd"},{"mountPath":"/var/lib/cilium/clustermesh","name":"clustermesh-secrets","readOnly":true},{"mountPath":"/lib/modules","name":"lib-modules","readOnly":true},{"mountPath":"/run/xtables.lock","name":"xtables-lock"},{"mountPath":"/tmp","name":"tmp"}]}],"dnsPolicy":"ClusterFirst","hostNetwork":true,"initContainers":[{"command":["cilium-dbg","build-config"],"env":[{"name":"K8S_NODE_NAME","valueFrom":{"fieldRef":{"apiVersion":"v1","fieldPath":"spec.nodeName"}}}],"image":"quay.io/cilium/cilium:v1.15.5","imagePullPolicy":"IfNotPresent","name":"config","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"FallbackToLogsOnError","volumeMounts":[{"mountPath":"/tmp","name":"tmp"}]},{"command":["sh","-ec","cp /usr/bin/cilium-mount /hostbin/cilium-mount;"],"env":[{"name":"CGROUP_ROOT","value":"/run/cilium/cgroupv2"},{"name":"BIN_PATH","value":"/opt/cni/bin"}],"image":"quay.io/cilium/cilium:v1.15.5","imagePullPolicy":"IfNotPresent","name":"mount-cgroup","resources":{},"securityContext":{"capabilities":{"add":["SYS_ADMIN","SYS_CHROOT","SYS_PTRACE"],"drop":["ALL"]}},"volumeMounts":[{"mountPath":"/hostproc","name":"hostproc"},{"mountPath":"/hostbin","name":"cni-path"}]}],"nodeSelector":{"kubernetes.io/os":"linux"},"priorityClassName":"system-node-critical","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"serviceAccount":"cilium","serviceAccountName":"cilium","terminationGracePeriodSeconds":1,"tolerations":[{"operator":"Exists"}],"volumes":[{"emptyDir":{},"name":"tmp"},{"hostPath":{"path":"/var/run/cilium","type":"DirectoryOrCreate"},"name":"cilium-run"},{"hostPath":{"path":"/sys/fs/bpf","type":"DirectoryOrCreate"},"name":"bpf-maps"},{"hostPath":{"path":"/proc","type":"Directory"},"name":"hostproc"},{"hostPath":{"path":"/run/cilium/cgroupv2","type":"DirectoryOrCreate"},"name":"cilium-cgroup"},{"hostPath":{"path":"/opt/cni/bin","type":"DirectoryOrCreate"},"name":"cni-path"},{"hostPath":{"path":"/etc/cni/net.d","type":"DirectoryOrCreate"},"name":"etc-cni-netd"},{"hostPath":{"path":"/lib/modules","type":""},"name":"lib-modules"},{"hostPath":{"path":"/run/xtables.lock","type":"FileOrCreate"},"name":"xtables-lock"},{"name":"clustermesh-secrets","projected":{"defaultMode":256,"sources":[{"secret":{"name":"cilium-clustermesh","optional":true}},{"secret":{"items":[{"key":"tls.key","path":"common-etcd-client.key"},{"key":"tls.crt","path":"common-etcd-client.crt"},{"key":"ca.crt","path":"common-etcd-client-ca.crt"}],"name":"clustermesh-apiserver-remote-cert","optional":true}}]}},{"hostPath":{"path":"/proc/sys/net","type":"Directory"},"name":"host-proc-sys-net"},{"hostPath":{"path":"/proc/sys/kernel","type":"Directory"},"name":"host-proc-sys-kernel"}]}},"updateStrategy":{"type":"OnDelete"}},"status":{"currentNumberScheduled":12,"desiredNumberScheduled":12,"numberAvailable":12,"numberMisscheduled":0,"numberReady":12,"observedGeneration":3,"updatedNumberScheduled":12}}`

func benchmarkInput(b *testing.B) *Input {
	raw, err := os.ReadFile(filepath.Join("..", "..", "testdata", "policies", "allowed", "node-exporter-host-ports.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		b.Fatal(err)
	}
	return &Input{Operation: OpCreate, Object: decodeObjectJSON(b, string(js)), Namespace: Namespace{Name: "monitoring", Labels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
		Cluster: &ClusterFacts{Nodes: 12, MatchingNodes: 12}}
}

// benchmarkInputs are a small DaemonSet of testdata/ and one as the API server sends it.
func benchmarkInputs(b *testing.B) map[string]*Input {
	large := benchmarkInput(b)
	large.Object = decodeObjectJSON(b, apiServerDaemonSet)
	large.Namespace = Namespace{Name: "kube-system"}
	return map[string]*Input{"small": benchmarkInput(b), "large": large}
}

// benchmarkBoth runs native (which must answer) and OPA alone on both benchmark inputs.
func benchmarkBoth(b *testing.B, native func(*native, *Input) bool, rego func(builtinQueries, *Input) error) {
	params := builtinParams()
	for _, size := range []string{"small", "large"} {
		in := benchmarkInputs(b)[size]
		b.Run(size+"/native", func(b *testing.B) {
			n := newNative(params)
			b.ReportAllocs()
			for b.Loop() {
				if !native(n, in) {
					b.Fatal("declined")
				}
			}
		})
		b.Run(size+"/rego", func(b *testing.B) {
			q := newRegoOnly(b, params)
			b.ReportAllocs()
			for b.Loop() {
				if err := rego(q, in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNativeValidate evaluates the four validation policies.
func BenchmarkNativeValidate(b *testing.B) {
	benchmarkBoth(b, func(n *native, in *Input) bool {
		for _, policy := range nativePolicyNames {
			if _, ok := n.violations(policy, in); !ok {
				return false
			}
		}
		return true
	}, func(q builtinQueries, in *Input) error {
		_, err := q.violations(in)
		return err
	})
}

// BenchmarkNativeInject decides the injection.
func BenchmarkNativeInject(b *testing.B) {
	benchmarkBoth(b, func(n *native, in *Input) bool {
		_, ok := n.inject(in)
		return ok
	}, func(q builtinQueries, in *Input) error {
		_, _, err := q.decision(in)
		return err
	})
}

// --- the random generator -------------------------------------------------------------------

// randomNativeCase returns a random DaemonSet input and parameters for the differential tests.
func randomNativeCase(r *rand.Rand) (in Input, params map[string]any) {
	g := &caseGen{r: r, odd: r.Intn(3) == 0}
	return g.nativeCase()
}

// caseGen builds random inputs and parameters: every field the policies read, of the right
// type, a wrong type, null or absent. With odd set it also makes choices native may decline
// (numbers beyond 2^53, Go types other than JSON's, tolerations Set.Inject cannot decode,
// fractional parameters used in arithmetic...), and records that it did in mayDecline; a case
// without such a choice is typical, and native must answer it.
type caseGen struct {
	r          *rand.Rand
	odd        bool
	mayDecline bool
}

func (g *caseGen) chance(p float64) bool { return g.r.Float64() < p }

func pickOne[T any](g *caseGen, xs ...T) T { return xs[g.r.Intn(len(xs))] }

// field sets m[key] to right() mostly, else to a value of any type, to null, or leaves it out.
func (g *caseGen) field(m map[string]any, key string, right func() any) {
	switch x := g.r.Intn(20); {
	case x < 15:
		m[key] = right()
	case x < 17:
		m[key] = g.anyValue(2)
	case x < 18:
		m[key] = nil
	}
}

// oddValue returns a value native may decline, and records it.
func (g *caseGen) oddValue() any {
	g.mayDecline = true
	return pickOne[any](g,
		json.Number("1e30"), json.Number("99999999999999999999"), json.Number("-9007199254740993"), 1e20, int64(1)<<60, 1<<62,
		json.Number("0.12345678901234567891"), json.Number("1e-400"), json.Number("123456789012345678.5"), math.NaN(), math.Inf(1),
		json.Number("1e99999"), json.Number("abc"), json.Number("01"), int32(5), uint64(7), []string{"a"}, map[string]string{"a": "b"},
		float64(1<<53+2), json.Number("1.0e10"),
	)
}

// number returns a number as a JSON decoder (mostly), YAML or Go code would give it.
func (g *caseGen) number() any {
	if g.odd && g.chance(0.1) {
		return g.oddValue()
	}
	switch g.r.Intn(8) {
	case 0, 1, 2, 3:
		return json.Number(strconv.Itoa(pickOne(g, -1, 0, 0, 1, 1, 2, 3, 5, 10, 20, 25, 30, 50, 99, 100, 101, 443, 9100, 65535, 1000000, 123456789)))
	case 4:
		if g.odd && g.chance(0.5) {
			// Equal to an integer or to a shorter decimal: not canonical.
			g.mayDecline = true
			return json.Number(pickOne(g, "1.0", "2e1", "1E2", "5.000", "0.0", "-0", "-0.0", "1e-3", "12.50", "1e6", "1.5e1", "3e-1", "100.0"))
		}
		return json.Number(pickOne(g, "1.5", "0.5", "-2.25", "30.5", "0.1", "12.25", "1e-05", "-0.001"))
	case 5:
		if g.odd && g.chance(0.3) {
			g.mayDecline = true
			return pickOne(g, 1e6, 1234567.0, math.Copysign(0, -1))
		}
		return pickOne(g, 1.5, 0.1, -0.5, 3.0, 0.0, 100.0, 9100.0, 2.5e-7, 999999.0)
	case 6:
		return pickOne[any](g, 0, 1, 3, 9100, -2, 1000000)
	}
	return pickOne[any](g, int64(0), int64(2), int64(443), int64(-7), int64(5000000))
}

func (g *caseGen) text() string {
	return pickOne(g, "", "abc", "50%", "5", "RollingUpdate", "OnDelete", "managed", "true", "false", " ", "ü", "a\"b\\c", "\xff", "tab\there", "100%", "x\u2028y")
}

// anyValue returns a value of a random JSON type.
func (g *caseGen) anyValue(depth int) any {
	n := 5
	if depth > 0 {
		n = 7
	}
	switch g.r.Intn(n) {
	case 0:
		return nil
	case 1:
		return g.chance(0.5)
	case 2:
		return g.text()
	case 3, 4:
		return g.number()
	case 5:
		var a []any
		for range g.r.Intn(3) {
			a = append(a, g.anyValue(depth-1))
		}
		if a == nil && g.chance(0.5) {
			return []any{}
		}
		return a
	}
	m := map[string]any{}
	for range g.r.Intn(3) {
		m[pickOne(g, "a", "b", "key", "", "ä")] = g.anyValue(depth - 1)
	}
	return m
}

func (g *caseGen) nativeCase() (Input, map[string]any) {
	in := Input{
		Operation: pickOne(g, OpCreate, OpUpdate, OpAudit, OpCheck),
		Object:    g.daemonSet(),
		Namespace: Namespace{Name: pickOne(g, "default", "kube-system", "team-a", "monitoring", "prod", "", "daemonguard", "é")},
	}
	if in.Operation == OpUpdate && g.chance(0.7) {
		in.OldObject = g.daemonSet()
	}
	if g.chance(0.7) {
		in.Namespace.Labels = map[string]string{}
		for k, v := range map[string]string{"team": pickOne(g, "a", "b"), "tier": pickOne(g, "system", "platform"), "kubernetes.io/metadata.name": in.Namespace.Name} {
			if g.chance(0.5) {
				in.Namespace.Labels[k] = v
			}
		}
	}
	if g.chance(0.6) {
		in.Cluster = &ClusterFacts{Nodes: 10, MatchingNodes: pickOne(g, -1, 0, 1, 2, 3, 4, 7, 8, 10, 99, 1000, 1<<40)}
	}
	return in, g.params()
}

func (g *caseGen) daemonSet() map[string]any {
	ds := map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet"}
	g.field(ds, "metadata", func() any { return g.metadata() })
	g.field(ds, "spec", func() any { return g.spec() })
	if g.chance(0.2) {
		ds["status"] = map[string]any{"numberReady": g.number(), "conditions": []any{g.anyValue(1)}}
	}
	return ds
}

func (g *caseGen) metadata() map[string]any {
	m := map[string]any{"name": "agent", "namespace": "team-a"}
	g.field(m, "labels", func() any {
		labels := map[string]any{}
		tier := pickOne[any](g, "edge", json.Number("5"))
		if g.odd && g.chance(0.2) {
			g.mayDecline = true
			tier = json.Number("5.0")
		}
		for k, v := range map[string]any{"app": pickOne(g, "agent", "skip"), "team": "a", "tier": tier} {
			if g.chance(0.6) {
				labels[k] = v
			}
		}
		return labels
	})
	g.field(m, "annotations", func() any { return g.annotations() })
	if g.chance(0.2) {
		// Left out of the input: even a number Rego cannot convert does not matter here.
		m["managedFields"] = []any{map[string]any{"manager": "kubectl", "fieldsV1": map[string]any{"f:x": json.Number("1e99999")}}}
	}
	return m
}

var knownAnnotationKeys = []string{
	"daemonguard.io/rollout", "daemonguard.io/max-unavailable", "daemonguard.io/steps", "daemonguard.io/paused", "daemonguard.io/resume",
	"daemonguard.io/progress-deadline", "daemonguard.io/topology-key", "daemonguard.io/on-delete-exempt", "daemonguard.io/inject",
}

func (g *caseGen) annotations() map[string]any {
	a := map[string]any{}
	for range g.r.Intn(6) {
		key := pickOne(g, knownAnnotationKeys...)
		if g.chance(0.15) {
			key = pickOne(g, "daemonguard.io/rolout", "daemonguard.io/", "daemonguard.io/Rollout", "status.daemonguard.io/progress",
				"kubectl.kubernetes.io/last-applied-configuration", "daemonguard.iox", "daemonguard.io/\xff")
		}
		if g.chance(0.1) {
			a[key] = g.anyValue(1)
		} else {
			a[key] = g.annotationValue(key)
		}
	}
	return a
}

func (g *caseGen) annotationValue(key string) string {
	switch key {
	case "daemonguard.io/rollout":
		return pickOne(g, "managed", "Managed", "", "yes")
	case "daemonguard.io/max-unavailable":
		return pickOne(g, "1", "2", "0", "25%", "100%", "101%", "0%", "1000000000", "999999999", " 2", "abc", "5.5", "007", "007%", "0100%")
	case "daemonguard.io/steps":
		return g.steps()
	case "daemonguard.io/paused", "daemonguard.io/inject":
		return pickOne(g, "true", "false", "yes", "", "TRUE")
	case "daemonguard.io/resume":
		return pickOne(g, "", "x", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("é", 63), strings.Repeat("é", 64), "\xff")
	case "daemonguard.io/progress-deadline":
		return g.duration()
	case "daemonguard.io/topology-key":
		return pickOne(g, "topology.kubernetes.io/zone", "zone", "a/b/c", "/zone", "Topology.k8s.io/zone", "-a", strings.Repeat("a", 64),
			"example.com/"+strings.Repeat("a", 63), strings.Repeat("a", 254)+"/x", "a_b.c-d", "", "é", "a.", "zone/")
	case "daemonguard.io/on-delete-exempt":
		return pickOne(g, "", " ", "manual", "\t\n", "\u00a0")
	}
	return g.text()
}

func (g *caseGen) duration() string {
	if g.chance(0.5) {
		return pickOne(g, "30s", "1h30m", "1.5h", "250ms", "0s", "-5m", "1d", "5µs", "5μs", "5us", "10m", "29s", "29.999999999s", "29.9999999999999999999s",
			"30.0s", "0.5m", "8760h", "8761h", "8759.99999999999999h", "8760.000000000000001h", "525600m", "31536000s", "31536000.000000001s", "",
			"30", " 30s", "1.5.5h", ".5h", "5.h", "1ms500us", "0.0000001ns", "0.5ns", "1.5ns", "2.5ns", "999999999999999999999h", "00030s", "1.000h",
			"0.333333333333333333333h", "1m1.1s", "5mss", "1h1h1h", "0.1h0.2h0.3h")
	}
	var b strings.Builder
	for range 1 + g.r.Intn(3) {
		b.WriteString(pickOne(g, "0", "1", "5", "30", "007", "90", "8760", "99999999999", "123456789012345678901"))
		if g.chance(0.4) {
			b.WriteString(pickOne(g, ".5", ".25", ".000", ".123456789", ".1", ".9999999999999999999", ".00000000001"))
		}
		b.WriteString(pickOne(g, "ns", "us", "µs", "μs", "ms", "s", "m", "h", "h", "s", "d", "S", ""))
	}
	return b.String()
}

func (g *caseGen) steps() string {
	if g.chance(0.3) {
		return pickOne(g, "1,pause:5m,25%,100%", "", " ", ",", "100%,", "1,,100%", "100%", "pause", "pause:1.5h", "0", "101%",
			"1, 2 ,pause, 50%,100%", "25%,pause:10m,50%,pause,100%,pause")
	}
	var parts []string
	for range g.r.Intn(6) {
		parts = append(parts, pickOne(g, "1", "2", "5", "10", "0", "3", "25%", "50%", "10%", "100%", "101%", "0%", "pause", "pause:5m", "pause:1.5h",
			"pause:0s", "pause:", "pause:-5m", "pause:8761h", "abc", "", " 25% ", "007", "1000000000", "100", "pause:1d", "pause:5µs",
			"pause:30", "pause:0.5ns", "pause:1.5ns", "100%", "100%"))
	}
	return strings.Join(parts, pickOne(g, ",", ", ", " ,"))
}

func (g *caseGen) budgetValue() any {
	if g.chance(0.5) {
		return g.number()
	}
	return pickOne(g, "0", "1", "25%", "0%", "100%", "101%", "50", "abc", "5 %", "007%", "9999%", "", "50%", "10%", "99999999999999999999%", "%")
}

func (g *caseGen) spec() map[string]any {
	s := map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "agent"}}}
	g.field(s, "updateStrategy", func() any {
		u := map[string]any{}
		g.field(u, "type", func() any {
			return pickOne(g, "RollingUpdate", "RollingUpdate", "OnDelete", "OnDelete", "Recreate", "")
		})
		g.field(u, "rollingUpdate", func() any {
			r := map[string]any{}
			g.field(r, "maxUnavailable", g.budgetValue)
			g.field(r, "maxSurge", g.budgetValue)
			return r
		})
		return u
	})
	g.field(s, "revisionHistoryLimit", g.number)
	g.field(s, "minReadySeconds", g.number)
	g.field(s, "template", func() any {
		t := map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "agent"}}}
		g.field(t, "spec", func() any {
			p := map[string]any{}
			g.field(p, "hostNetwork", func() any { return pickOne[any](g, true, false, true) })
			g.field(p, "containers", func() any { return g.containers() })
			if g.chance(0.4) {
				g.field(p, "initContainers", func() any { return g.containers() })
			}
			return p
		})
		return t
	})
	return s
}

func (g *caseGen) containers() []any {
	var list []any
	for range g.r.Intn(4) {
		if g.chance(0.1) {
			list = append(list, g.anyValue(1))
			continue
		}
		c := map[string]any{"image": "example.com/agent:1.0"}
		g.field(c, "name", func() any { return pickOne(g, "agent", "init", "sidecar", "") })
		g.field(c, "ports", func() any {
			var ports []any
			for range g.r.Intn(3) {
				p := map[string]any{"protocol": "TCP"}
				g.field(p, "containerPort", g.number)
				if g.chance(0.5) {
					g.field(p, "hostPort", g.number)
				}
				ports = append(ports, p)
			}
			return ports
		})
		list = append(list, c)
	}
	return list
}

// paramNumber returns a number as parameters.yaml gives it (float64), sometimes as Go code
// would (int64); fractional and huge values only when odd.
func (g *caseGen) paramNumber() any {
	if g.odd && g.chance(0.2) {
		g.mayDecline = true
		return pickOne[any](g, 12.5, 0.5, 1e20, math.NaN(), json.Number("1e30"), 2.5e-7, int32(3), 1e6, int64(1)<<55, int64(-1)<<60, int64(1)<<53)
	}
	v := pickOne(g, -5, 0, 1, 2, 3, 5, 10, 20, 25, 30, 33, 50, 60, 100, 150, 999999)
	if g.chance(0.2) {
		return int64(v)
	}
	return float64(v)
}

func (g *caseGen) paramValue() any {
	if g.chance(0.7) {
		return g.paramNumber()
	}
	return pickOne[any](g, "50", nil, []any{1.0}, map[string]any{"a": 1.0}, true)
}

var genClassNames = []string{"system", "team", "default", "monitoring", "platform"}

func (g *caseGen) params() map[string]any {
	p := builtinParams()
	if g.chance(0.4) {
		var classes []any
		for range 1 + g.r.Intn(3) {
			c := map[string]any{}
			g.field(c, "name", func() any { return pickOne(g, genClassNames...) })
			g.field(c, "namespaces", func() any {
				return pickOne[any](g, []any{"kube-system"}, []any{"team-a", "prod"}, []any{"monitoring", 5.0}, []any{}, []any{""})
			})
			g.field(c, "matchLabels", func() any {
				return pickOne[any](g, map[string]any{"team": "a"}, map[string]any{}, map[string]any{"tier": "platform", "team": "b"}, map[string]any{"team": 5.0})
			})
			classes = append(classes, c)
		}
		p["namespaceClasses"] = classes
		if g.chance(0.1) {
			p["namespaceClasses"] = g.anyValue(1)
		}
	}
	policies := p["policies"].(map[string]any)
	for range g.r.Intn(5) {
		policy := pickOne(g, "rolling_update_budget", "revision_history", "rollout_annotations")
		key := map[string][]string{
			"rolling_update_budget": {"maxUnavailablePercent"},
			"revision_history":      {"minRevisionHistoryLimit", "maxRevisionHistoryLimit", "minReadySeconds"},
			"rollout_annotations":   {"minProgressDeadlineSeconds"},
		}[policy]
		class := pickOne(g, genClassNames...)
		objectAt(policies, policy, class)[pickOne(g, key...)] = g.paramValue()
	}
	if g.chance(0.05) {
		policies[pickOne(g, "rolling_update_budget", "revision_history", "rollout_annotations")] = pickOne[any](g, "x", []any{}, nil)
	}
	if g.chance(0.03) {
		p["policies"] = pickOne[any](g, "x", []any{})
	}
	if g.chance(0.5) {
		inject := p["inject"].(map[string]any)
		for range 1 + g.r.Intn(3) {
			target := inject
			if g.chance(0.4) {
				target = objectAt(inject, "namespaceClasses", pickOne(g, genClassNames...))
			}
			g.injectSetting(target)
		}
		if g.chance(0.05) {
			inject["namespaceClasses"] = pickOne[any](g, "x", []any{map[string]any{}})
		}
	}
	if g.chance(0.03) {
		p["inject"] = pickOne[any](g, nil, "x", map[string]any{}, map[string]any{"enabled": false})
	}
	if g.chance(0.03) {
		delete(p, pickOne(g, "inject", "namespaceClasses", "policies"))
	}
	return p
}

func (g *caseGen) injectSetting(s map[string]any) {
	switch g.r.Intn(5) {
	case 0:
		s["enabled"] = pickOne[any](g, false, true, "false", 0.0, nil)
	case 1:
		s["priorityClassName"] = pickOne[any](g, "", "node-critical", 5.0, nil)
	case 2:
		s["excludedNamespaces"] = pickOne[any](g, []any{"team-a"}, []any{"prod", 5.0, "kube-system"}, []any{}, "team-a")
	case 3:
		s["excludedLabels"] = pickOne[any](g, map[string]any{"app": "skip"}, map[string]any{"team": "a"}, map[string]any{}, map[string]any{"tier": 5.0},
			map[string]any{"team": "a", "app": "agent"}, map[string]any{"a": map[string]any{"b": 1.0}}, "x")
	default:
		var list []any
		for range g.r.Intn(3) {
			list = append(list, g.toleration())
		}
		s["tolerations"] = list
	}
}

func (g *caseGen) toleration() any {
	if g.odd && g.chance(0.3) {
		g.mayDecline = true
		return pickOne[any](g, map[string]any{"key": "k", "tolerationSeconds": 1.5}, map[string]any{"Key": "k"}, map[string]any{"tolerationSeconds": 1e7}, map[string]any{"foo": "bar"},
			map[string]any{"key": 5.0}, map[string]any{"tolerationSeconds": 1e6}, map[string]any{"tolerationSeconds": "300"},
			map[string]any{"value": "\xff"}, map[string]any{"effect": true})
	}
	return pickOne[any](g,
		map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
		map[string]any{"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 300.0},
		map[string]any{"key": "k", "tolerationSeconds": nil, "value": nil},
		map[string]any{"tolerationSeconds": int64(-5)},
		map[string]any{},
		"not an object", 5.0,
	)
}

// violations returns the policy's violations (Policy, Field, Message set; Action left empty),
// in any order; ok=false means "evaluate this policy with Rego".
func (n *native) violations(policy string, in *Input) (vs []Violation, ok bool) {
	if n.declineAll || !convertible(in) {
		return nil, false
	}
	return n.evaluate(policy, in)
}
