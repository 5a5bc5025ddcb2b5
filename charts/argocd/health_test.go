package argocd

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

const (
	fixturesDir   = "../../testdata/argocd/daemonsets"
	cmFixturesDir = "../../testdata/argocd/configmaps"
	configMapPath = "../../testdata/argocd/argocd-cm-health.yaml"
	appPath       = "../../testdata/argocd/application.yaml"
)

// validStatuses are the statuses the script may return. Unknown is left out on purpose: the
// script only returns it when its own code raised an error (caught by its pcall), which the tests
// treat as a failure.
var validStatuses = []string{"Healthy", "Progressing", "Degraded", "Suspended"}

// healthCheck is one script with its fixtures: objects of apiVersion and kind in dir, which
// together must expect every status in statuses.
type healthCheck struct {
	name, script, dir string
	apiVersion, kind  string
	statuses          []string
}

var healthChecks = []healthCheck{
	{name: "health.lua", script: HealthLua, dir: fixturesDir, apiVersion: "apps/v1", kind: "DaemonSet", statuses: validStatuses},
	{name: "configmap_health.lua", script: ConfigMapHealthLua, dir: cmFixturesDir, apiVersion: "v1", kind: "ConfigMap", statuses: []string{"Healthy", "Degraded"}},
}

type luaLib struct {
	name string
	open lua.LGFunction
}

// libSets are the library sets the script runs with in the tests.
var libSets = []struct {
	name string
	libs []luaLib
}{
	// What Argo CD opens for a health script from argocd-cm without useOpenLibs (util/lua runLua:
	// package, base, table and a safe os with only time/date, which the script does not use).
	{"argocd", []luaLib{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}}},
	// The restricted set base, table, string, math; no os, no io.
	{"restricted", []luaLib{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}}},
}

// toLua converts a decoded JSON/YAML value (or an unstructured object, whose integers are int64)
// into a Lua value the way Argo CD hands `obj` to health scripts: maps become tables keyed by
// string, slices 1-based arrays, numbers LNumber, nulls nil. Like Argo CD (LTable.Append), a
// null inside a list is dropped rather than leaving a hole that would stop ipairs. Any other Go
// type is an error, so a test can never pass on a value silently turned into nil.
func toLua(L *lua.LState, v any) (lua.LValue, error) {
	switch x := v.(type) {
	case nil:
		return lua.LNil, nil
	case bool:
		return lua.LBool(x), nil
	case string:
		return lua.LString(x), nil
	case float64, float32, int, int32, int64, uint32, uint64:
		return lua.LNumber(reflect.ValueOf(x).Convert(reflect.TypeFor[float64]()).Float()), nil
	case json.Number:
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %q: %w", x, err)
		}
		return lua.LNumber(f), nil
	case []any:
		t := L.CreateTable(len(x), 0)
		for i, item := range x {
			lv, err := toLua(L, item)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			t.Append(lv) // no-op for nil
		}
		return t, nil
	case map[string]any:
		t := L.CreateTable(0, len(x))
		for k, item := range x {
			lv, err := toLua(L, item)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			if lv != lua.LNil {
				t.RawSetString(k, lv)
			}
		}
		return t, nil
	default:
		return nil, fmt.Errorf("unsupported type %T", v)
	}
}

var compiled sync.Map // script -> *lua.FunctionProto

func compile(script string) (*lua.FunctionProto, error) {
	if proto, ok := compiled.Load(script); ok {
		return proto.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(script), "health.lua")
	if err != nil {
		return nil, err
	}
	proto, err := lua.Compile(chunk, "health.lua")
	if err != nil {
		return nil, err
	}
	compiled.Store(script, proto)
	return proto, nil
}

// runHealth runs script with obj the way Argo CD does and returns hs.status and hs.message.
// Reading or writing an undefined global is an error, which catches misspelt names on every path
// the tests execute.
func runHealth(script string, obj any, libs []luaLib) (status, message string, err error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range libs {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return "", "", fmt.Errorf("open %q: %w", lib.name, err)
		}
	}
	// The bound only stops a script that loops forever; a loaded CI machine must not trip it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	L.SetContext(ctx)

	lv, err := toLua(L, obj)
	if err != nil {
		return "", "", fmt.Errorf("convert obj: %w", err)
	}
	L.SetGlobal("obj", lv)
	strict := L.NewTable()
	strict.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		if key := L.CheckAny(2); key.String() != "obj" { // obj itself may be nil
			L.RaiseError("read of undefined global %q", key.String())
		}
		return 0
	}))
	strict.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("write of global %q", L.CheckAny(2).String())
		return 0
	}))
	L.SetMetatable(L.G.Global, strict)

	proto, err := compile(script)
	if err != nil {
		return "", "", err
	}
	// What L.DoString does, minus parsing and compiling the script again for every object.
	L.Push(L.NewFunctionFromProto(proto))
	if err := L.PCall(0, lua.MultRet, nil); err != nil {
		return "", "", err
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("script returned %s, want a table", L.Get(-1).Type())
	}
	st, ok := hs.RawGetString("status").(lua.LString)
	if !ok {
		return "", "", fmt.Errorf("hs.status is %s, want a string", hs.RawGetString("status").Type())
	}
	switch m := hs.RawGetString("message").(type) {
	case lua.LString:
		message = string(m)
	default:
		if m != lua.LNil {
			return "", "", fmt.Errorf("hs.message is %s, want a string", m.Type())
		}
	}
	return string(st), message, nil
}

type fixture struct {
	name            string
	obj             map[string]any
	status          string
	message         *string // exact message, when given
	messageContains []string
}

// loadFixtures reads the check's fixtures (testdata/argocd/daemonsets/*.yaml for health.lua,
// testdata/argocd/configmaps/*.yaml for configmap_health.lua). Leading comment lines carry the
// expectations: "# expect-status: S" (required), "# expect-message: M" (exact; empty means an
// empty message) and any number of "# expect-message-contains: text".
func loadFixtures(t *testing.T, check healthCheck) []fixture {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(check.dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatalf("no fixtures in %s", check.dir)
	}
	var fixtures []fixture
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f := fixture{name: strings.TrimSuffix(filepath.Base(p), ".yaml")}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "#") {
				break
			}
			directive, value, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
			if !ok {
				continue
			}
			value = strings.TrimSpace(value)
			switch directive {
			case "expect-status":
				f.status = value
			case "expect-message":
				f.message = &value
			case "expect-message-contains":
				if value == "" {
					t.Fatalf("%s: empty expect-message-contains", p)
				}
				f.messageContains = append(f.messageContains, value)
			}
		}
		if !slices.Contains(validStatuses, f.status) {
			t.Fatalf("%s: expect-status %q, want one of %v", p, f.status, validStatuses)
		}
		if f.message == nil && f.messageContains == nil {
			t.Fatalf("%s: no expect-message or expect-message-contains", p)
		}
		jsonData, err := yaml.YAMLToJSON(data)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		// Decoded as Argo CD's live objects are: unstructured, integers as int64.
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(jsonData); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if u.GetKind() != check.kind || u.GetAPIVersion() != check.apiVersion {
			t.Fatalf("%s: %s %s, want a %s %s", p, u.GetAPIVersion(), u.GetKind(), check.apiVersion, check.kind)
		}
		f.obj = u.Object
		fixtures = append(fixtures, f)
	}
	return fixtures
}

func TestHealthFixtures(t *testing.T) {
	for _, check := range healthChecks {
		testFixtures(t, check)
	}
}

func testFixtures(t *testing.T, check healthCheck) {
	fixtures := loadFixtures(t, check)
	seen := map[string]bool{}
	for _, f := range fixtures {
		seen[f.status] = true
		for _, set := range libSets {
			t.Run(check.kind+"/"+f.name+"/"+set.name, func(t *testing.T) {
				status, message, err := runHealth(check.script, f.obj, set.libs)
				if err != nil {
					t.Fatalf("script error: %v", err)
				}
				if status != f.status {
					t.Errorf("status = %q, want %q (message %q)", status, f.status, message)
				}
				if f.message != nil && message != *f.message {
					t.Errorf("message = %q, want %q", message, *f.message)
				}
				for _, want := range f.messageContains {
					if !strings.Contains(message, want) {
						t.Errorf("message = %q, want it to contain %q", message, want)
					}
				}
			})
		}
	}
	for _, s := range check.statuses {
		if !seen[s] {
			t.Errorf("no %s fixture expects %s", check.kind, s)
		}
	}
}

// The bake as the planner reports it: a managed DaemonSet whose every pod runs the revision is
// Progressing while daemonguard.io/bake runs, with the planner's message (reason Baking, the
// revision and the time left), and Healthy only once the planner says Complete, so that a fleet's
// RollingSync step waits for the bake.
func TestHealthWaitsForTheBake(t *testing.T) {
	const revision = "6b8c9d7f5"
	settings, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationBake: "5m"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 29, 2, 30, 0, 0, time.UTC)
	in := rolloutplan.RolloutState{
		Name: "agent", Namespace: "node-agents", TargetRevision: revision, Settings: settings, Now: start,
		Nodes: []rolloutplan.NodeState{{Name: "worker-0", Reachable: true, Pods: []rolloutplan.PodState{
			{Name: "agent-x", UID: "u", Revision: revision, Ready: true, ReadySince: start.Add(-time.Minute)},
		}}},
		Status: rolloutapi.Status{Revision: revision},
	}
	in.Status = rolloutplan.Compute(in).Status // the rollout completes at start
	for _, tc := range []struct {
		after                  time.Duration
		wantReason, wantStatus string
	}{
		{0, rolloutapi.ReasonBaking, "Progressing"},
		{3 * time.Minute, rolloutapi.ReasonBaking, "Progressing"},
		{5 * time.Minute, rolloutapi.ReasonComplete, "Healthy"},
	} {
		in.Now = start.Add(tc.after)
		plan := rolloutplan.Compute(in)
		if plan.Reason != tc.wantReason {
			t.Fatalf("at +%v the planner says %s: %s, want %s", tc.after, plan.Reason, plan.Message, tc.wantReason)
		}
		ds := &appsv1.DaemonSet{
			TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
			ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: in.Namespace, Generation: 2,
				Annotations: rolloutapi.EncodeStatus(plan.Status)},
			Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1,
				NumberReady: 1, CurrentNumberScheduled: 1},
		}
		ds.Annotations[rolloutapi.AnnotationRollout] = rolloutapi.RolloutManaged
		ds.Annotations[rolloutapi.AnnotationBake] = "5m"
		for _, c := range rolloutapi.RolloutConditions {
			cond := appsv1.DaemonSetCondition{Type: c, Status: corev1.ConditionFalse}
			if string(c) == string(plan.Phase) {
				cond.Status, cond.Reason, cond.Message = corev1.ConditionTrue, plan.Reason, plan.Message
			}
			ds.Status.Conditions = append(ds.Status.Conditions, cond)
		}
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range libSets {
			status, message, err := runHealth(HealthLua, obj, set.libs)
			if err != nil {
				t.Fatalf("%s: %v", set.name, err)
			}
			if status != tc.wantStatus || message != plan.Message {
				t.Errorf("at +%v (%s, %s): health %s %q, want %s %q", tc.after, plan.Reason, set.name, status, message, tc.wantStatus, plan.Message)
			}
		}
	}
}

// TestScriptUsesBaseFunctionsOnly: Argo CD runs configured health scripts without the string and
// math libraries, so the script must not call into them (the fixtures run without them too, but
// only on the paths they reach).
func TestScriptUsesBaseFunctionsOnly(t *testing.T) {
	comment := regexp.MustCompile(`--.*$`)
	forbidden := regexp.MustCompile(`\b(string|math|os|io|table|debug|coroutine|package|utf8)\s*\.|\b(require|load|loadstring|dofile|loadfile|setmetatable|getmetatable|rawset|print)\b|:\s*[A-Za-z_]\w*\s*\(`)
	for _, check := range healthChecks {
		for i, line := range strings.Split(check.script, "\n") {
			code := comment.ReplaceAllString(line, "")
			if m := forbidden.FindString(code); m != "" {
				t.Errorf("%s:%d uses %q: %s", check.name, i+1, m, strings.TrimSpace(line))
			}
		}
		if strings.Contains(check.script, "\r") {
			t.Errorf("%s contains carriage returns", check.name)
		}
	}
}

// TestConfigMapHealthReadsTheWebhooksNames: configmap_health.lua spells the label that selects
// policy ConfigMaps and the annotation the webhook writes exactly as the webhook does.
func TestConfigMapHealthReadsTheWebhooksNames(t *testing.T) {
	for _, name := range []string{admission.PolicyConfigMapLabel, admission.PolicyErrorAnnotation} {
		if !strings.Contains(ConfigMapHealthLua, `"`+name+`"`) {
			t.Errorf("configmap_health.lua does not read %q", name)
		}
	}
}

// garbage is a vocabulary of values the mutation test puts anywhere in an object.
func garbage(r *rand.Rand, depth int) any {
	keys := []string{"metadata", "annotations", "generation", "name", "spec", "updateStrategy", "type",
		"status", "conditions", "reason", "message", "observedGeneration", "desiredNumberScheduled",
		"updatedNumberScheduled", "numberAvailable", "daemonguard.io/rollout",
		"status.daemonguard.io/step", "status.daemonguard.io/updated", "labels", "daemonguard.io/policy",
		"status.daemonguard.io/policy-error", "1", ""}
	scalars := []any{nil, "", "True", "true", "managed", "OnDelete", "Failed", "Paused", "Progressing",
		"Complete", "abc", "12", "-3", "nan", "1e400", int64(0), int64(-1), int64(7), int64(1) << 53,
		1e300, -1e300, 3.5, true, false}
	if depth <= 0 || r.Intn(3) > 0 {
		return scalars[r.Intn(len(scalars))]
	}
	if r.Intn(2) == 0 {
		l := make([]any, r.Intn(4))
		for i := range l {
			l[i] = garbage(r, depth-1)
		}
		return l
	}
	m := map[string]any{}
	for range r.Intn(5) {
		m[keys[r.Intn(len(keys))]] = garbage(r, depth-1)
	}
	return m
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, item := range x {
			m[k] = deepCopy(item)
		}
		return m
	case []any:
		l := make([]any, len(x))
		for i, item := range x {
			l[i] = deepCopy(item)
		}
		return l
	default:
		return v
	}
}

// mutate replaces one randomly chosen value anywhere in obj (a map or a list entry) by garbage.
func mutate(r *rand.Rand, obj map[string]any) {
	type slot struct {
		m   map[string]any
		l   []any
		key string
		idx int
	}
	var slots []slot
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys) // deterministic for a given seed
			for _, k := range keys {
				slots = append(slots, slot{m: x, key: k})
				walk(x[k])
			}
		case []any:
			for i := range x {
				slots = append(slots, slot{l: x, idx: i})
				walk(x[i])
			}
		}
	}
	walk(obj)
	if len(slots) == 0 {
		obj["status"] = garbage(r, 3)
		return
	}
	s := slots[r.Intn(len(slots))]
	if s.m != nil {
		s.m[s.key] = garbage(r, 3)
	} else {
		s.l[s.idx] = garbage(r, 3)
	}
}

// checkNoError runs every health check on obj.
func checkNoError(t *testing.T, desc string, obj any) {
	t.Helper()
	for _, check := range healthChecks {
		for _, set := range libSets {
			status, message, err := runHealth(check.script, obj, set.libs)
			if err != nil {
				t.Fatalf("%s (%s, %s): script error: %v", desc, check.name, set.name, err)
			}
			if !slices.Contains(check.statuses, status) {
				t.Fatalf("%s (%s, %s): status %q, message %q", desc, check.name, set.name, status, message)
			}
		}
	}
}

// TestScriptNeverErrors: whatever the object looks like, the script returns a valid status and
// never reaches its own error fallback.
func TestScriptNeverErrors(t *testing.T) {
	managed := map[string]any{"daemonguard.io/rollout": "managed"}
	cases := map[string]any{
		"nil obj":                    nil,
		"string obj":                 "DaemonSet",
		"number obj":                 42.0,
		"list obj":                   []any{"a", 1.0},
		"empty obj":                  map[string]any{},
		"metadata string":            map[string]any{"metadata": "x", "status": map[string]any{}},
		"annotations string":         map[string]any{"metadata": map[string]any{"annotations": "daemonguard.io/rollout=managed"}},
		"annotation list":            map[string]any{"metadata": map[string]any{"annotations": map[string]any{"daemonguard.io/rollout": []any{"managed"}}}},
		"status string":              map[string]any{"metadata": map[string]any{"annotations": managed, "generation": 1.0}, "status": "Running"},
		"status string unmanaged":    map[string]any{"metadata": map[string]any{"name": "x"}, "status": "Running"},
		"status list":                map[string]any{"metadata": map[string]any{"annotations": managed}, "status": []any{"x"}},
		"conditions map":             map[string]any{"metadata": map[string]any{"annotations": managed}, "status": map[string]any{"conditions": map[string]any{"Failed": map[string]any{"status": "True"}}}},
		"conditions string":          map[string]any{"metadata": map[string]any{"annotations": managed}, "status": map[string]any{"conditions": "Failed=True"}},
		"conditions number":          map[string]any{"metadata": map[string]any{"annotations": managed}, "status": map[string]any{"conditions": 3.0}},
		"condition fields wrong":     map[string]any{"metadata": map[string]any{"annotations": managed}, "status": map[string]any{"conditions": []any{map[string]any{"type": map[string]any{}, "status": []any{}}, map[string]any{"type": "Failed", "status": "True", "reason": []any{1.0}, "message": 7.0}}}},
		"progressing fields wrong":   map[string]any{"metadata": map[string]any{"annotations": map[string]any{"daemonguard.io/rollout": "managed", "status.daemonguard.io/step": 3.0, "status.daemonguard.io/updated": map[string]any{}}}, "status": map[string]any{"conditions": []any{map[string]any{"type": "Progressing", "status": true, "message": false}}}},
		"complete numbers as text":   map[string]any{"metadata": map[string]any{"annotations": managed}, "status": map[string]any{"desiredNumberScheduled": "3", "updatedNumberScheduled": "x", "numberAvailable": nil, "conditions": []any{map[string]any{"type": "Complete", "status": "True"}}}},
		"generation garbage":         map[string]any{"metadata": map[string]any{"generation": map[string]any{}, "name": 5.0}, "status": map[string]any{"observedGeneration": "soon"}},
		"generation not a number":    map[string]any{"metadata": map[string]any{"annotations": managed, "generation": "abc"}},
		"spec garbage":               map[string]any{"metadata": map[string]any{"annotations": managed}, "spec": 5.0, "status": map[string]any{"observedGeneration": 1.0}},
		"updateStrategy string":      map[string]any{"spec": map[string]any{"updateStrategy": "OnDelete"}, "status": map[string]any{"desiredNumberScheduled": 2.0}},
		"huge numbers":               map[string]any{"metadata": map[string]any{"generation": 1e300}, "status": map[string]any{"observedGeneration": -1e300, "desiredNumberScheduled": 1e308}},
		"json numbers":               map[string]any{"metadata": map[string]any{"generation": json.Number("2")}, "status": map[string]any{"observedGeneration": json.Number("2"), "desiredNumberScheduled": json.Number("1")}},
		"deep nesting":               map[string]any{"status": map[string]any{"conditions": []any{[]any{[]any{[]any{map[string]any{"conditions": []any{}}}}}}}},
		"managed empty status":       map[string]any{"metadata": map[string]any{"annotations": managed}, "status": map[string]any{}},
		"managed status no metadata": map[string]any{"metadata": nil, "status": map[string]any{"conditions": []any{nil, nil}}},
		"labels string":              map[string]any{"metadata": map[string]any{"labels": "daemonguard.io/policy=true"}},
		"policy error not a string":  map[string]any{"metadata": map[string]any{"labels": map[string]any{"daemonguard.io/policy": "true"}, "annotations": map[string]any{"status.daemonguard.io/policy-error": []any{"x"}}}},
		"policy label not a string":  map[string]any{"metadata": map[string]any{"labels": map[string]any{"daemonguard.io/policy": true}, "annotations": map[string]any{"status.daemonguard.io/policy-error": "x"}}},
	}
	for desc, obj := range cases {
		checkNoError(t, desc, obj)
	}

	r := rand.New(rand.NewSource(20260504))
	for i := range 300 {
		checkNoError(t, fmt.Sprintf("random object %d", i), garbage(r, 5))
	}
	for _, f := range slices.Concat(loadFixtures(t, healthChecks[0]), loadFixtures(t, healthChecks[1])) {
		for i := range 60 {
			obj := deepCopy(f.obj).(map[string]any)
			for range 1 + r.Intn(3) {
				mutate(r, obj)
			}
			checkNoError(t, fmt.Sprintf("%s mutation %d", f.name, i), obj)
		}
	}
}

// FuzzHealthScript feeds arbitrary JSON documents to the script (go test -fuzz=FuzzHealthScript).
func FuzzHealthScript(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join(fixturesDir, "*.yaml"))
	cmPaths, _ := filepath.Glob(filepath.Join(cmFixturesDir, "*.yaml"))
	paths = append(paths, cmPaths...)
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(j)
	}
	f.Add([]byte(`{"status":"x","metadata":{"annotations":{"daemonguard.io/rollout":"managed"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj any
		if json.Unmarshal(data, &obj) != nil {
			return
		}
		checkNoError(t, string(data), obj)
	})
}
