package webhook

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
)

func TestStatusOnlyUpdate(t *testing.T) {
	base := `{"metadata":{"name":"d","resourceVersion":"1","annotations":{"a":"1"%s}},"spec":{"x":%s}}`
	tests := map[string]struct {
		old, new string
		want     bool
	}{
		"status annotation added":            {fmt.Sprintf(base, "", "1"), fmt.Sprintf(base, `,"status.daemonguard.io/step":"1/2"`, "1"), true},
		"status annotation changed":          {fmt.Sprintf(base, `,"status.daemonguard.io/step":"1/2"`, "1"), fmt.Sprintf(base, `,"status.daemonguard.io/step":"2/2"`, "1"), true},
		"status annotation removed":          {fmt.Sprintf(base, `,"status.daemonguard.io/step":"1/2"`, "1"), fmt.Sprintf(base, "", "1"), true},
		"spec changed too":                   {fmt.Sprintf(base, "", "1"), fmt.Sprintf(base, `,"status.daemonguard.io/step":"1/2"`, "2"), false},
		"a user annotation changed":          {fmt.Sprintf(base, "", "1"), strings.Replace(fmt.Sprintf(base, `,"status.daemonguard.io/x":"y"`, "1"), `"a":"1"`, `"a":"2"`, 1), false},
		"nothing daemonguard changed":        {fmt.Sprintf(base, "", "1"), fmt.Sprintf(base, "", "1"), false},
		"a setting annotation is not status": {fmt.Sprintf(base, "", "1"), fmt.Sprintf(base, `,"daemonguard.io/paused":"true"`, "1"), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			oldObj, err1 := decodeObject([]byte(tc.old))
			newObj, err2 := decodeObject([]byte(tc.new))
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if got := statusOnlyUpdate(oldObj, newObj); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// Property: over random pairs of objects (labels and annotations absent, empty or differing,
// status and other annotations added, changed and removed, the spec changed or not), the Go rule
// answers as StatusOnlyUpdateCEL evaluated by CEL.
func TestStatusOnlyUpdateMatchesCEL(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(StatusOnlyUpdateCEL)
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(21, 1))
	pick := func(options ...string) string { return options[rng.IntN(len(options))] }
	stringMap := func(keys ...string) any {
		switch rng.IntN(4) {
		case 0:
			return nil // absent
		case 1:
			return map[string]any{}
		}
		m := map[string]any{}
		for _, k := range keys {
			if rng.IntN(2) == 0 {
				m[k] = pick("1", "2")
			}
		}
		return m
	}
	object := func() map[string]any {
		meta := map[string]any{"name": "d"}
		if l := stringMap("app", "tier"); l != nil {
			meta["labels"] = l
		}
		if a := stringMap("note", "daemonguard.io/paused", "status.daemonguard.io/step", "status.daemonguard.io/revision"); a != nil {
			meta["annotations"] = a
		}
		return map[string]any{"metadata": meta, "spec": map[string]any{"x": pick("1", "2")}}
	}
	seen := map[bool]int{}
	for i := range 3000 {
		oldObj, newObj := object(), object()
		if i%2 == 0 {
			// Mostly the same object with one annotation moved, so both answers occur often.
			newObj = object()
			newObj["spec"] = oldObj["spec"]
			delete(newObj["metadata"].(map[string]any), "labels")
			if l, ok := oldObj["metadata"].(map[string]any)["labels"]; ok {
				newObj["metadata"].(map[string]any)["labels"] = l
			}
		}
		op := pick("UPDATE", "UPDATE", "CREATE")
		out, _, err := prg.Eval(map[string]any{"request": map[string]any{"operation": op}, "object": newObj, "oldObject": oldObj})
		if err != nil {
			t.Fatalf("CEL on %v -> %v: %v", oldObj, newObj, err)
		}
		want := out.Value().(bool)
		got := op == "UPDATE" && statusOnlyUpdate(oldObj, newObj)
		seen[want]++
		if got != want {
			t.Fatalf("%s %v -> %v: Go says %v, CEL %v", op, oldObj, newObj, got, want)
		}
	}
	if seen[true] == 0 || seen[false] == 0 {
		t.Fatalf("the cases never made both answers: %v", seen)
	}
}
