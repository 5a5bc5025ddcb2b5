package webhook

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// encodesLikeEncodingJSON fails t unless encodePatch gives exactly json.Marshal's bytes, or both
// fail.
func encodesLikeEncodingJSON(t *testing.T, ops []jsonpatch.Operation) {
	t.Helper()
	want, wantErr := json.Marshal(ops)
	got, err := encodePatch(ops)
	if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("encodePatch(%#v)\n = %s, %v\nencoding/json: %s, %v", ops, got, err, want, wantErr)
	}
}

func TestEncodePatchIsEncodingJSONsOutput(t *testing.T) {
	tricky := "<a href=\"x\">&amp;</a>\\ \b\f\n\r\t\x00\x1f\x7f é 中 😀 \u2028\u2029 \xff\xc3 \xed\xa0\x80"
	for name, ops := range map[string][]jsonpatch.Operation{
		"none":                {},
		"nil":                 nil,
		"add null":            {{Operation: "add", Path: "/a"}},
		"remove":              {{Operation: "remove", Path: "/spec/nodeName"}},
		"remove with a value": {{Operation: "remove", Path: "/a", Value: "x"}},
		"test null":           {{Operation: "test", Path: "/a"}},
		"strings":             {{Operation: "replace", Path: "/" + tricky, Value: tricky}},
		"numbers":             {{Operation: "add", Path: "/n", Value: []any{json.Number("0"), json.Number("-1.5e+10"), json.Number("300")}}},
		"bad number":          {{Operation: "add", Path: "/n", Value: json.Number("0x1")}},
		"empty number":        {{Operation: "add", Path: "/n", Value: json.Number("")}},
		"nested": {{Operation: "add", Path: "/spec", Value: map[string]any{
			"z": []any{}, "a": map[string]any{}, tricky: true, "m": map[string]any{"b": false, "a": nil}, "nilmap": map[string]any(nil),
		}}},
		"typed values go to encoding/json": {{Operation: "add", Path: "/t", Value: corev1.Toleration{Key: "k", TolerationSeconds: ptr.To[int64](3)}}},
		"an int":                           {{Operation: "add", Path: "/i", Value: 7}},
		"nil slices":                       {{Operation: "add", Path: "/a", Value: []any(nil)}, {Operation: "add", Path: "/b", Value: map[string]any{"x": []any(nil)}}, {Operation: "remove", Path: "/c", Value: []any(nil)}},
		"deep":                             {{Operation: "add", Path: "/d", Value: deepValue(maxPatchDepth + 5)}},
	} {
		t.Run(name, func(t *testing.T) { encodesLikeEncodingJSON(t, ops) })
	}
}

func deepValue(depth int) any {
	var v any = "leaf"
	for range depth {
		v = []any{v}
	}
	return v
}

// A value that contains itself is encoding/json's error, not a crash.
func TestEncodePatchRejectsACycle(t *testing.T) {
	cycle := map[string]any{}
	cycle["self"] = cycle
	if _, err := encodePatch([]jsonpatch.Operation{{Operation: "add", Path: "/c", Value: cycle}}); err == nil {
		t.Fatal("a cyclic value was encoded")
	}
}

// TestEncodePatchMatchesOnRandomPatches compares random patches of random JSON values, and the
// patches the webhook itself makes of the seed objects.
func TestEncodePatchMatchesOnRandomPatches(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	pieces := []string{"a", "<", ">", "&", "\"", "\\", "\n", "\x01", "é", "\u2028", "\xff", "/", "~", " "}
	str := func() string {
		var b strings.Builder
		for n := r.IntN(6); n > 0; n-- {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		return b.String()
	}
	var value func(depth int) any
	value = func(depth int) any {
		switch r.IntN(7 - min(depth, 2)) {
		case 0:
			return nil
		case 1:
			return r.IntN(2) == 0
		case 2:
			return json.Number([]string{"0", "-3", "1.25", "1e9", "12345678901234567890"}[r.IntN(5)])
		case 3, 4:
			return str()
		case 5:
			a := make([]any, r.IntN(4))
			for i := range a {
				a[i] = value(depth + 1)
			}
			return a
		default:
			m := map[string]any{}
			for n := r.IntN(4); n > 0; n-- {
				m[str()] = value(depth + 1)
			}
			return m
		}
	}
	for range 5000 {
		ops := make([]jsonpatch.Operation, r.IntN(4))
		for i := range ops {
			ops[i] = jsonpatch.Operation{Operation: []string{"add", "replace", "remove", "test"}[r.IntN(4)], Path: "/" + str(), Value: value(0)}
		}
		encodesLikeEncodingJSON(t, ops)
	}
	res, err := PodPinPatch([]byte(`{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"d","uid":"u","controller":true}]},"spec":{"nodeName":"n<1>"}}`))
	if err != nil || len(res.Patch) == 0 {
		t.Fatalf("pin patch %+v, %v", res, err)
	}
	encodesLikeEncodingJSON(t, res.Patch)
	set := builtinSet(t)
	in := &policy.Input{Operation: policy.OpCreate, Namespace: policy.Namespace{Name: "default"}}
	if in.Object, err = decodeObject([]byte(seedObject)); err != nil {
		t.Fatal(err)
	}
	d, err := set.Inject(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := DaemonSetPatch([]byte(seedObject), d)
	if err != nil || len(patch) == 0 {
		t.Fatalf("seed patch %v, %v", patch, err)
	}
	encodesLikeEncodingJSON(t, patch)
}
