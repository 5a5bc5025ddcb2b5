package admission

import (
	"fmt"

	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// GateScopePolicy names the denials of analysis gates whose query cannot be kept to the
// DaemonSet's namespace. It is a Go check, not a Rego policy: no Rego built-in parses PromQL, and
// the rewrite it checks is the one the rollout controller runs (rolloutanalysis.Scope), so that a query this
// admits is a query the controller can scope.
const GateScopePolicy = "analysis_gate_scope"

// gateSample is what a gate's placeholders expand to at admission, where no wave is known:
// values of the same shape as the controller's, so that a query that parses here parses there.
func gateSample(name, namespace string) rolloutapi.QueryVars {
	return rolloutapi.QueryVars{Nodes: []string{"node-a.example.internal", "node-b"}, Revision: "5d8f7c9b6", OldRevision: "7b6c5d4e3",
		Name: name, Namespace: namespace}
}

// gateViolations denies, for a DaemonSet outside the namespaces marked for node agents, every
// analysis gate whose query, rendered, Prometheus' parser cannot read: the controller could not
// keep it to the namespace's series, and would never measure it. Gates that do not parse as
// gates are rollout_annotations' to deny; in a marked namespace queries run as written.
func gateViolations(in *policy.Input) []policy.Violation {
	if NodeAgentsNamespace(in.Namespace.Labels) {
		return nil
	}
	meta, _ := in.Object["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	value, _ := annotations[rolloutapi.AnnotationAnalysis].(string)
	gates, err := rolloutapi.ParseGates(value)
	if err != nil {
		return nil
	}
	name, _ := meta["name"].(string)
	scope := rolloutanalysis.Scope{Namespace: in.Namespace.Name}
	if scope.Namespace == "" {
		scope.Namespace = "default"
	}
	var out []policy.Violation
	for _, g := range gates {
		if _, err := scope.Apply(rolloutapi.RenderQuery(g.Query, gateSample(name, in.Namespace.Name))); err != nil {
			out = append(out, policy.Violation{
				Policy: GateScopePolicy, Field: fmt.Sprintf("metadata.annotations[%q]", rolloutapi.AnnotationAnalysis), Action: policy.Deny,
				Message: fmt.Sprintf("gate %s: its query must be PromQL the controller can keep to namespace %s's series (outside namespaces labelled %s=true): %v",
					g.Name, scope.Namespace, NodeAgentsLabel, err),
			})
		}
	}
	return out
}
