package admission

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	appsv1 "k8s.io/api/apps/v1"
)

// seedObject is a DaemonSet as a user writes it.
const seedObject = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"nginx-ds","namespace":"default"},"spec":{"selector":{"matchLabels":{"app":"nginx-ds"}},"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}},"template":{"metadata":{"labels":{"app":"nginx-ds"}},"spec":{"tolerations":[{"key":"node-role.kubernetes.io/master","effect":"NoSchedule"}],"containers":[{"name":"nginx-ds","image":"nginx:1.7.9","ports":[{"containerPort":80}]}]}}}}`

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
	prg := statusOnlyCEL(t)
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

// statusOnlyCEL is StatusOnlyUpdateCEL compiled as the API server compiles a matchCondition.
func statusOnlyCEL(t testing.TB) cel.Program {
	t.Helper()
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
	return prg
}

// FuzzStatusOnlyUpdate runs the same check on DaemonSet updates the fuzzer finds (go test -fuzz
// FuzzStatusOnlyUpdate ./internal/admission/): statusOnlyUpdate, which tells the core to skip
// admission, answers as StatusOnlyUpdateCEL, which tells the API server to skip the webhooks.
// Both objects are first read into a DaemonSet and written back, as the API server does before
// admission, so that both rules see what they would see in a cluster.
func FuzzStatusOnlyUpdate(f *testing.F) {
	prg := statusOnlyCEL(f)
	withAnnotations := func(a string) string {
		return strings.Replace(seedObject, `"namespace":"default"`, `"namespace":"default","annotations":{`+a+`}`, 1)
	}
	f.Add(seedObject, withAnnotations(`"status.daemonguard.io/step":"1/2"`))
	f.Add(withAnnotations(`"status.daemonguard.io/step":"1/2","daemonguard.io/steps":"1,100%"`), withAnnotations(`"status.daemonguard.io/step":"2/2","daemonguard.io/steps":"1,100%"`))
	f.Add(withAnnotations(`"status.daemonguard.io/step":"1/2"`), seedObject)
	f.Add(withAnnotations(`"status.daemonguard.io/step":"1/2"`), strings.Replace(withAnnotations(`"status.daemonguard.io/step":"2/2"`), "nginx:1.7.9", "nginx:1.7.10", 1))
	f.Add(seedObject, withAnnotations(`"daemonguard.io/paused":"true"`))
	f.Add(seedObject, withAnnotations(`"status.daemonguard.io/":"","Status.daemonguard.io/x":"y"`))
	f.Fuzz(func(t *testing.T, oldJSON, newJSON string) {
		oldGo, oldCEL, ok1 := asStored(oldJSON)
		newGo, newCEL, ok2 := asStored(newJSON)
		if !ok1 || !ok2 {
			return
		}
		out, _, err := prg.Eval(map[string]any{"request": map[string]any{"operation": "UPDATE"}, "object": newCEL, "oldObject": oldCEL})
		if err != nil {
			t.Fatalf("CEL on %v -> %v: %v", oldCEL, newCEL, err)
		}
		if got, want := statusOnlyUpdate(oldGo, newGo), out.Value().(bool); got != want {
			t.Fatalf("%v -> %v: Go says %v, CEL %v", oldCEL, newCEL, got, want)
		}
	})
}

// asStored reads raw into a DaemonSet and writes it back, as the API server stores and sends
// it, and returns it decoded as the core decodes it and as CEL sees it; false when raw is no
// DaemonSet.
func asStored(raw string) (core, celObject map[string]any, ok bool) {
	var ds appsv1.DaemonSet
	if json.Unmarshal([]byte(raw), &ds) != nil {
		return nil, nil, false
	}
	stored, err := json.Marshal(&ds)
	if err != nil {
		return nil, nil, false
	}
	core, err = decodeObject(stored)
	if err != nil || json.Unmarshal(stored, &celObject) != nil {
		return nil, nil, false
	}
	return core, celObject, true
}
