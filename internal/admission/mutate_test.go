package admission

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/policy"
)

var controlPlaneDecision = policy.InjectDecision{
	Inject: true,
	Tolerations: []corev1.Toleration{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	},
	PriorityClassName: "system-node-critical",
}

func patched(t *testing.T, raw []byte, ops []jsonpatch.Operation) []byte {
	t.Helper()
	if len(ops) == 0 {
		return raw
	}
	out, err := applyPatch(raw, ops)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func podSpecOf(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	obj, err := decodeObject(raw)
	if err != nil {
		t.Fatal(err)
	}
	return obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

func TestDaemonSetPatch(t *testing.T) {
	tests := map[string]struct {
		podSpec         string // JSON of spec.template.spec
		decision        policy.InjectDecision
		wantTolerations int    // tolerations after the patch
		wantPriority    string // priorityClassName after the patch
		wantNoPatch     bool
	}{
		"an empty template gets both tolerations and the class": {
			podSpec: `{"containers":[{"name":"a","image":"x"}]}`, decision: controlPlaneDecision,
			wantTolerations: 2, wantPriority: "system-node-critical",
		},
		"the seed's Equal master toleration is kept and both Exists ones are appended": {
			podSpec:  `{"tolerations":[{"key":"node-role.kubernetes.io/master","effect":"NoSchedule"}],"containers":[]}`,
			decision: controlPlaneDecision, wantTolerations: 3, wantPriority: "system-node-critical",
		},
		"a tolerate-everything toleration covers all": {
			podSpec:  `{"tolerations":[{"operator":"Exists"}],"priorityClassName":"mine","containers":[]}`,
			decision: controlPlaneDecision, wantTolerations: 1, wantPriority: "mine", wantNoPatch: true,
		},
		"an Exists toleration with any effect covers the key": {
			podSpec:  `{"tolerations":[{"key":"node-role.kubernetes.io/control-plane","operator":"Exists"}],"containers":[]}`,
			decision: controlPlaneDecision, wantTolerations: 2, wantPriority: "system-node-critical",
		},
		"the user's priority class is never replaced": {
			podSpec:  `{"priorityClassName":"agents","containers":[]}`,
			decision: controlPlaneDecision, wantTolerations: 2, wantPriority: "agents",
		},
		"an explicit priority blocks the class (the Priority plugin would reject the pods)": {
			podSpec:  `{"priority":1000,"containers":[]}`,
			decision: controlPlaneDecision, wantTolerations: 2, wantPriority: "",
		},
		"a skip decision patches nothing": {
			podSpec:  `{"containers":[]}`,
			decision: policy.InjectDecision{Inject: false, Reason: "opted out"}, wantTolerations: 0, wantNoPatch: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			raw := []byte(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"x"},"spec":{"template":{"spec":` + tc.podSpec + `}}}`)
			ops, err := DaemonSetPatch(raw, tc.decision)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantNoPatch != (len(ops) == 0) {
				t.Fatalf("patch = %v, want empty: %v", ops, tc.wantNoPatch)
			}
			out := podSpecOf(t, patched(t, raw, ops))
			tols, _ := out["tolerations"].([]any)
			if len(tols) != tc.wantTolerations {
				t.Errorf("got %d tolerations %v, want %d", len(tols), tols, tc.wantTolerations)
			}
			got, _ := out["priorityClassName"].(string)
			if got != tc.wantPriority {
				t.Errorf("priorityClassName = %q, want %q", got, tc.wantPriority)
			}
		})
	}
}

// Fields this build of k8s.io/api does not know (newer API servers, alpha fields) must survive:
// the patch touches only what it adds.
func TestDaemonSetPatchKeepsUnknownFields(t *testing.T) {
	raw := []byte(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"x"},"spec":{"futureSpecField":{"a":[1,2.50,3]},` +
		`"template":{"spec":{"containers":[{"name":"a","image":"x","futureContainerField":true}],"futurePodField":"keep"}}}}`)
	ops, err := DaemonSetPatch(raw, controlPlaneDecision)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Operation != "add" {
			t.Errorf("unexpected %s at %s: only additions are allowed", op.Operation, op.Path)
		}
	}
	out, err := decodeObject(patched(t, raw, ops))
	if err != nil {
		t.Fatal(err)
	}
	spec := out["spec"].(map[string]any)
	if fmt.Sprint(spec["futureSpecField"]) != "map[a:[1 2.50 3]]" {
		t.Errorf("futureSpecField = %v", spec["futureSpecField"])
	}
	podSpec := spec["template"].(map[string]any)["spec"].(map[string]any)
	if podSpec["futurePodField"] != "keep" || podSpec["containers"].([]any)[0].(map[string]any)["futureContainerField"] != true {
		t.Errorf("unknown pod fields lost: %v", podSpec)
	}
}

func TestDaemonSetPatchRejectsMalformedTemplates(t *testing.T) {
	for name, raw := range map[string]string{
		"not JSON":                  `{"spec":`,
		"spec is a string":          `{"spec":"x"}`,
		"template spec is a list":   `{"spec":{"template":{"spec":[]}}}`,
		"tolerations is an object":  `{"spec":{"template":{"spec":{"tolerations":{}}}}}`,
		"toleration key is numeric": `{"spec":{"template":{"spec":{"tolerations":[{"key":5}]}}}}`,
		"JSON null":                 `null`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DaemonSetPatch([]byte(raw), controlPlaneDecision); err == nil {
				t.Errorf("no error for %s", raw)
			}
		})
	}
}

// Property: for random templates, (1) a second pass over the output yields an empty patch,
// (2) every toleration the user wrote is still there, in the same order, at the front, and
// (3) the result tolerates everything the decision asked for.
func TestDaemonSetPatchIsIdempotentAndKeepsUserTolerations(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []string{"", "node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master", "dedicated", "gpu"}
	ops := []string{"", "Equal", "Exists"}
	effects := []string{"", "NoSchedule", "NoExecute", "PreferNoSchedule"}
	for i := range 2000 {
		var user []any
		for range rng.IntN(4) {
			tol := map[string]any{}
			if k := keys[rng.IntN(len(keys))]; k != "" {
				tol["key"] = k
			}
			op := ops[rng.IntN(len(ops))]
			if op != "" {
				tol["operator"] = op
			}
			if op != "Exists" && rng.IntN(2) == 0 {
				tol["value"] = "v"
			}
			if e := effects[rng.IntN(len(effects))]; e != "" {
				tol["effect"] = e
			}
			user = append(user, tol)
		}
		podSpec := map[string]any{"containers": []any{}}
		if user != nil {
			podSpec["tolerations"] = user
		}
		if rng.IntN(3) == 0 {
			podSpec["priorityClassName"] = "custom"
		}
		raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": podSpec}}})

		first, err := DaemonSetPatch(raw, controlPlaneDecision)
		if err != nil {
			t.Fatalf("case %d %s: %v", i, raw, err)
		}
		out := patched(t, raw, first)
		second, err := DaemonSetPatch(out, controlPlaneDecision)
		if err != nil {
			t.Fatal(err)
		}
		if len(second) != 0 {
			t.Fatalf("case %d: second pass over %s patched again: %v", i, out, second)
		}
		got, _ := podSpecOf(t, out)["tolerations"].([]any)
		if len(got) < len(user) || (len(user) > 0 && !reflect.DeepEqual(got[:len(user)], user)) {
			t.Fatalf("case %d: user tolerations %v became %v", i, user, got)
		}
		var have []corev1.Toleration
		b, _ := json.Marshal(got)
		_ = json.Unmarshal(b, &have)
		for _, w := range controlPlaneDecision.Tolerations {
			taint := corev1.Taint{Key: w.Key, Effect: w.Effect, Value: "any"}
			tolerated := false
			for _, h := range have {
				if h.ToleratesTaint(logr.Discard(), &taint, false) {
					tolerated = true
				}
			}
			if !tolerated {
				t.Fatalf("case %d: result %v does not tolerate %v", i, have, taint)
			}
		}
	}
}

// diffPatch is the reference DaemonSetPatch is held to, simple enough to be obviously right:
// decode, add what is missing to the generic object (creating spec, template and spec as needed),
// re-encode and diff the whole object with jsonpatch.CreatePatch.
func diffPatch(t *testing.T, raw []byte, d policy.InjectDecision) []jsonpatch.Operation {
	t.Helper()
	obj, err := decodeObject(raw)
	if err != nil {
		t.Fatal(err)
	}
	podSpec := obj
	for _, k := range []string{"spec", "template", "spec"} {
		next, _ := podSpec[k].(map[string]any)
		if next == nil {
			next = map[string]any{}
			podSpec[k] = next
		}
		podSpec = next
	}
	have, err := existingTolerations(podSpec)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := podSpec["tolerations"].([]any)
	added := false
	for _, w := range d.Tolerations {
		if !covered(have, w) {
			have = append(have, w)
			list = append(list, tolerationJSON(w))
			added = true
		}
	}
	if added {
		podSpec["tolerations"] = list
	}
	if needsPriorityClass(podSpec, d.PriorityClassName) {
		podSpec["priorityClassName"] = d.PriorityClassName
	}
	mutated, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := jsonpatch.CreatePatch(raw, mutated)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// Property: the written patch does what diffing the mutated object did, for random objects with
// missing, null and present levels, random tolerations and priority fields.
func TestDaemonSetPatchMatchesTheDiff(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tolerations := []any{
		map[string]any{"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"},
		map[string]any{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"},
		map[string]any{"operator": "Exists"},
		map[string]any{"key": "gpu", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": json.Number("30")},
		nil,
	}
	decisions := []policy.InjectDecision{controlPlaneDecision, {Inject: true, Tolerations: controlPlaneDecision.Tolerations}, {Inject: true, PriorityClassName: "p"}}
	pick := func(options ...any) any { return options[rng.IntN(len(options))] }
	for i := range 3000 {
		podSpec := map[string]any{"containers": []any{map[string]any{"name": "a", "futureField": true}}}
		switch rng.IntN(4) {
		case 0: // no tolerations key
		case 1:
			podSpec["tolerations"] = nil
		default:
			var list []any
			for range rng.IntN(4) {
				list = append(list, tolerations[rng.IntN(len(tolerations))])
			}
			podSpec["tolerations"] = append([]any{}, list...)
		}
		if v := pick("absent", "", nil, "mine"); v != "absent" {
			podSpec["priorityClassName"] = v
		}
		if rng.IntN(5) == 0 {
			podSpec["priority"] = pick(json.Number("1000"), nil)
		}
		var obj map[string]any
		switch rng.IntN(7) {
		case 0:
			obj = map[string]any{"metadata": map[string]any{"name": "x"}}
		case 1:
			obj = map[string]any{"spec": nil}
		case 2:
			obj = map[string]any{"spec": map[string]any{"selector": map[string]any{}}}
		case 3:
			obj = map[string]any{"spec": map[string]any{"template": nil}}
		case 4:
			obj = map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{}}}}
		case 5:
			obj = map[string]any{"spec": map[string]any{"template": map[string]any{"spec": nil}}}
		default:
			obj = map[string]any{"spec": map[string]any{"futureSpecField": 1, "template": map[string]any{"spec": podSpec}}}
		}
		raw, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		d := decisions[rng.IntN(len(decisions))]
		ops, err := DaemonSetPatch(raw, d)
		if err != nil {
			t.Fatalf("case %d %s: %v", i, raw, err)
		}
		want := diffPatch(t, raw, d)
		if len(ops) == 0 && len(want) > 0 && !onlyCreatesEmptyObjects(t, raw, want) {
			t.Fatalf("case %d %s: no patch, the diff is %v", i, raw, want)
		}
		got, wantOut := patched(t, raw, ops), patched(t, raw, want)
		if len(ops) == 0 {
			continue // the diff may have created empty objects only (checked above)
		}
		var g, w any
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(wantOut, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("case %d %s (%+v):\nwritten %s\ngives   %s\ndiff    %s\ngives   %s", i, raw, d, mustJSON(ops), got, mustJSON(want), wantOut)
		}
		if again, err := DaemonSetPatch(got, d); err != nil || len(again) != 0 {
			t.Fatalf("case %d: second pass over %s: %v, %v", i, got, again, err)
		}
	}
}

// onlyCreatesEmptyObjects tells a reference diff whose only effect is to create an empty
// spec.template.spec (diffPatch does that when a decision has nothing to add); the written patch
// leaves it out, which is the one difference allowed.
func onlyCreatesEmptyObjects(t *testing.T, raw []byte, ops []jsonpatch.Operation) bool {
	t.Helper()
	out, err := decodeObject(patched(t, raw, ops))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := child(out, "spec")
	for _, k := range []string{"template", "spec"} {
		if err != nil || ps == nil {
			return false
		}
		ps, err = child(ps, k)
	}
	return err == nil && len(ps) == 0
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCovers(t *testing.T) {
	w := corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	cases := map[string]struct {
		h    corev1.Toleration
		want bool
	}{
		"an identical toleration":                {w, true},
		"Exists for the key and every effect":    {corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists}, true},
		"Exists for every key":                   {corev1.Toleration{Operator: corev1.TolerationOpExists}, true},
		"Exists for every key, another effect":   {corev1.Toleration{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		"Exists for the key with another effect": {corev1.Toleration{Key: "k", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}, false},
		"Equal for the key and effect":           {corev1.Toleration{Key: "k", Effect: corev1.TaintEffectNoSchedule}, false},
		"Exists for another key":                 {corev1.Toleration{Key: "j", Operator: corev1.TolerationOpExists}, false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Covers(c.h, w); got != c.want {
				t.Errorf("Covers(%+v, %+v) = %v", c.h, w, got)
			}
		})
	}
	equal := corev1.Toleration{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)}
	if !Covers(corev1.Toleration{Key: "k", Operator: corev1.TolerationOpEqual, Value: "v", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)}, equal) {
		t.Error("an explicit Equal operator does not cover the same toleration with the operator left out")
	}
	if Covers(corev1.Toleration{Key: "k", Value: "v", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](6)}, equal) {
		t.Error("other tolerationSeconds cover")
	}
}
