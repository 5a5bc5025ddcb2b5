package policy

import (
	"slices"
	"testing"
)

// Policies lists the validation policies a set defines, so that the audit can report a pass for
// every policy an object does not violate.
func TestPolicies(t *testing.T) {
	const customPolicy = `package daemonguard.policies.require_team

violation contains {"field": "metadata.labels.team", "msg": "the DaemonSet has no team label"} if {
	not input.object.metadata.labels.team
}
`
	builtins := []string{"node_agent_grants", "on_delete_managed", "revision_history", "rolling_update_budget", "rollout_annotations"}
	cases := []struct {
		name    string
		sources []Source
		want    []string
	}{
		{name: "the built-ins are the five validation policies (not inject, not lib)", want: builtins},
		{
			name:    "a ConfigMap's policy is added",
			sources: []Source{{Name: "configmap/team", Files: map[string]string{"require_team.rego": customPolicy}}},
			want:    []string{"node_agent_grants", "on_delete_managed", "require_team", "revision_history", "rolling_update_budget", "rollout_annotations"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := builtinWith(t, c.sources...).Policies(); !slices.Equal(got, c.want) {
				t.Errorf("Policies() = %v, want %v", got, c.want)
			}
		})
	}
}
