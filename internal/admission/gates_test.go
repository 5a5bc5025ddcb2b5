package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// gatedDaemonSet is a DaemonSet of namespace ns whose analysis annotation is gates.
func gatedDaemonSet(t *testing.T, gates string) []byte {
	t.Helper()
	ds := map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": "agent", "annotations": map[string]any{rolloutapi.AnnotationAnalysis: gates}},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "agent"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "agent"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "agent", "image": "registry.example/agent@sha256:" + strings.Repeat("a", 64)}}}},
		},
	}
	raw, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// A gate's query is refused at admission, outside the namespaces marked for node agents, when
// the controller could not keep it to the namespace's series; anything the controller can scope
// is admitted, and a marked namespace's queries run as written.
func TestAdmissionRefusesAGateItCannotScope(t *testing.T) {
	set, err := policy.Compile(context.Background(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	const broken = "- name: broken\n  query: 'sum(rate(errors{node=~\"{{ nodes }}\"}[5m]) by (node)'\n  max: 1\n"
	tests := map[string]struct {
		gates  string
		labels map[string]string // the namespace's
		denial string            // part of the gate denial; "" wants none
	}{
		"a query that does not parse, in a tenant's namespace: denied naming the gate and the parser's error": {
			gates: broken, denial: "gate broken: its query must be PromQL the controller can keep to namespace tenant's series",
		},
		"the same query in a namespace marked for node agents: not this check's to refuse": {
			gates: broken, labels: map[string]string{NodeAgentsLabel: "true"},
		},
		"a query reading another namespace: admitted, the controller keeps it to the tenant's": {
			gates: "- name: secrets\n  query: 'payments_secret_info{namespace=\"payments\"} # {{ nodes }}'\n  nodeLabel: zz\n  max: 1\n",
		},
		"every placeholder, rendered, parses": {
			gates: "- name: all\n  query: 'max by (node) (x{node=~\"{{ nodes }}\",rev=\"{{ revision }}\",old=\"{{ old_revision }}\",ds=\"{{ name }}\",ns=\"{{ namespace }}\"})'\n  max: 1\n",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := &Reviewer{Lookups: Lookups{NamespaceLabels: func(context.Context, string) (map[string]string, error) { return tc.labels, nil }}}
			r := a.Validate(context.Background(), set, Review{Operation: policy.OpCreate, Namespace: "tenant", Object: gatedDaemonSet(t, tc.gates)})
			if r.Err() != nil {
				t.Fatal(r.Err())
			}
			var got []policy.Violation
			for _, v := range r.Verdict.Denials {
				if v.Policy == GateScopePolicy {
					got = append(got, v)
				}
			}
			switch {
			case tc.denial == "" && len(got) > 0:
				t.Fatalf("denials %v, want none of %s", got, GateScopePolicy)
			case tc.denial != "" && (len(got) != 1 || !strings.Contains(got[0].Message, tc.denial) || !strings.Contains(got[0].Message, "parse error")):
				t.Fatalf("denials %v, want one saying %q and the parse error", got, tc.denial)
			}
		})
	}
}
