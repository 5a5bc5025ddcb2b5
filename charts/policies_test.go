package charts

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// TestPolicyConfigMapsCompile feeds the rendered policy ConfigMaps to the policy engine the way
// the webhook's reloader does, so the chart's example values are a policy set the webhook accepts.
func TestPolicyConfigMapsCompile(t *testing.T) {
	objs := objects(t, render(t, renderCases["policies as labelled ConfigMaps"]))
	var sources []policy.Source
	for _, cm := range typedObjects[*corev1.ConfigMap](objs) {
		if cm.Labels[admission.PolicyConfigMapLabel] != "true" {
			continue
		}
		if cm.Namespace != namespace {
			t.Errorf("policy ConfigMap %s is in namespace %q; the webhook reads only %q", cm.Name, cm.Namespace, namespace)
		}
		sources = append(sources, policy.Source{Name: "configmap/" + cm.Name, Files: cm.Data})
	}
	if len(sources) != 2 {
		t.Fatalf("rendered %d policy ConfigMaps, want 2", len(sources))
	}
	modules, params, err := policy.OverBuiltin(sources)
	if err != nil {
		t.Fatal(err)
	}
	set, err := policy.Compile(context.Background(), modules, params)
	if err != nil {
		t.Fatal(err)
	}
	if m := "configmap/require-team-label/require_team_label.rego"; !slices.Contains(set.Modules(), m) {
		t.Errorf("compiled modules %v lack %s", set.Modules(), m)
	}
	if got := set.Enforcement("revision_history"); got != policy.Warn {
		t.Errorf("revision_history enforcement %q, want %q from team-limits' parameters.yaml", got, policy.Warn)
	}
}
