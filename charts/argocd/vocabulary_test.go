package argocd

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// luaConstant is a line of health.lua that names a string: local NAME = "value".
var luaConstant = regexp.MustCompile(`^local ([A-Z_]+) = "([^"]*)"$`)

// luaConstants are the string constants health.lua declares, by name.
func luaConstants(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(HealthLua, "\n") {
		if m := luaConstant.FindStringSubmatch(line); m != nil {
			out[m[1]] = m[2]
		}
	}
	return out
}

// The Lua cannot import Go: health.lua spells each rollout key, value and condition type once,
// as a constant, exactly as internal/rolloutapi does, and nowhere else.
func TestHealthLuaSpellsTheRolloutVocabulary(t *testing.T) {
	consts := luaConstants(t)
	want := map[string]string{
		"MANAGED_ANNOTATION": rolloutapi.AnnotationRollout,
		"MANAGED_VALUE":      rolloutapi.RolloutManaged,
		"MANAGED_STRATEGY":   string(appsv1.OnDeleteDaemonSetStrategyType),
		"STEP_ANNOTATION":    rolloutapi.StatusStep,
		"UPDATED_ANNOTATION": rolloutapi.StatusUpdated,
	}
	for name, value := range want {
		if consts[name] != value {
			t.Errorf("health.lua: %s = %q, want %q", name, consts[name], value)
		}
	}
	var luaConditions, goConditions []string
	for name, value := range consts {
		if strings.HasPrefix(name, "CONDITION_") {
			luaConditions = append(luaConditions, value)
		}
	}
	for _, c := range rolloutapi.RolloutConditions {
		goConditions = append(goConditions, string(c))
	}
	slices.Sort(luaConditions)
	slices.Sort(goConditions)
	if !slices.Equal(luaConditions, goConditions) {
		t.Errorf("health.lua CONDITION_* constants are %v, want rolloutapi.RolloutConditions %v", luaConditions, goConditions)
	}
	// No second spelling: a daemonguard.io literal outside a constant would escape this test.
	for i, line := range strings.Split(HealthLua, "\n") {
		code, _, _ := strings.Cut(line, "--")
		if strings.Contains(code, "daemonguard.io") && !luaConstant.MatchString(line) {
			t.Errorf("health.lua:%d spells a daemonguard.io name outside a constant: %s", i+1, strings.TrimSpace(line))
		}
	}
}

// health.lua reports daemonguard's rollout exactly for the DaemonSets rolloutapi.IsManaged
// calls managed. A DaemonSet that has no rollout condition yet and whose generation is observed
// shows which side took it: daemonguard's waits for its controller, the built-in one does not.
func TestHealthLuaManagedIsRolloutapiIsManaged(t *testing.T) {
	const waiting = "Waiting for daemonguard's rollout controller"
	for _, value := range []string{"", rolloutapi.RolloutManaged, "Managed", "true"} {
		for _, strategy := range []appsv1.DaemonSetUpdateStrategyType{"", appsv1.OnDeleteDaemonSetStrategyType, appsv1.RollingUpdateDaemonSetStrategyType, "Other"} {
			ds := &appsv1.DaemonSet{
				TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
				ObjectMeta: metav1.ObjectMeta{Name: "agent", Generation: 2},
				Spec:       appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: strategy}},
				Status:     appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, UpdatedNumberScheduled: 1, NumberAvailable: 3},
			}
			if value != "" {
				ds.Annotations = map[string]string{rolloutapi.AnnotationRollout: value}
			}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ds)
			if err != nil {
				t.Fatal(err)
			}
			_, message, err := runHealth(HealthLua, obj, libSets[0].libs)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := message == waiting, rolloutapi.IsManaged(ds); got != want {
				t.Errorf("annotation %q, strategy %q: health.lua reports daemonguard's rollout: %v, rolloutapi.IsManaged: %v (message %q)", value, strategy, got, want, message)
			}
		}
	}
}
