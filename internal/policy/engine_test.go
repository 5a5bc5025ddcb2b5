package policy

import (
	"context"
	"testing"
)

func compileOne(t *testing.T, source string) *Set {
	t.Helper()
	set, err := Compile(context.Background(), []Module{{Name: "p.rego", Source: source}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestDeterministic(t *testing.T) {
	modules, params, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	builtin, err := Compile(context.Background(), modules, params)
	if err != nil {
		t.Fatal(err)
	}
	if !builtin.Deterministic() {
		t.Error("the built-in policies are not deterministic")
	}
	for name, source := range map[string]string{
		"a call in a body": `package daemonguard.policies.p

violation contains {"field": "f", "msg": "m"} if time.now_ns() > 0
`,
		"a call in a term": `package daemonguard.policies.p

violation contains {"field": "f", "msg": sprintf("%d", [rand.intn("x", 10)])} if true
`,
		"a call in a helper function": `package daemonguard.policies.p

id(x) := uuid.rfc4122(x)

violation contains {"field": "f", "msg": id("a")} if true
`,
	} {
		if compileOne(t, source).Deterministic() {
			t.Errorf("%s: a set calling a nondeterministic built-in counts as deterministic", name)
		}
	}
}

// metadata.managedFields is left out of the input; the caller's object is not modified.
func TestInputLeavesOutManagedFields(t *testing.T) {
	set := compileOne(t, `package daemonguard.policies.p

violation contains {"field": "metadata.managedFields", "msg": "seen"} if input.object.metadata.managedFields
violation contains {"field": "metadata.managedFields", "msg": "old seen"} if input.oldObject.metadata.managedFields
violation contains {"field": "metadata.name", "msg": "name seen"} if input.object.metadata.name == "x"
`)
	obj := map[string]any{"metadata": map[string]any{"name": "x", "managedFields": []any{map[string]any{"manager": "m"}}}}
	old := map[string]any{"metadata": map[string]any{"name": "x", "managedFields": []any{}}}
	vs, err := set.Validate(context.Background(), &Input{Operation: OpUpdate, Object: obj, OldObject: old})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 1 || vs[0].Message != "name seen" {
		t.Errorf("violations %v, want only the name", vs)
	}
	if _, ok := obj["metadata"].(map[string]any)["managedFields"]; !ok {
		t.Error("the caller's object lost its managedFields")
	}
}

// A cancelled context stops an evaluation with an error, never with an empty (compliant) answer.
func TestCancelledEvaluationIsAnError(t *testing.T) {
	set := compileOne(t, `package daemonguard.policies.p

violation contains {"field": "f", "msg": "m"} if {
	some i in numbers.range(1, 100000000)
	i < 0
}
`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if vs, err := set.Validate(ctx, &Input{Operation: OpCheck, Object: map[string]any{}}); err == nil {
		t.Errorf("no error, violations %v", vs)
	}
}

func TestWorkersRunAndRaisePanics(t *testing.T) {
	var w workers
	ran := false
	w.run(func() { ran = true })
	if !ran {
		t.Fatal("the function did not run")
	}
	defer func() {
		if p := recover(); p != "boom" {
			t.Errorf("recovered %v, want the function's panic", p)
		}
	}()
	w.run(func() { panic("boom") })
}

// Evaluations run concurrently beyond the number of workers: a busy pool never makes one wait.
func TestWorkersNeverQueue(t *testing.T) {
	var w workers
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	for range 16 {
		go w.run(func() { started <- struct{}{}; <-release })
	}
	for range 16 {
		<-started // all 16 run at once, though there are only a few workers
	}
	close(release)
}
