# node_agent_grants: what makes a DaemonSet a node agent is granted by an administrator, not
# written by hand. A namespace an administrator labelled daemonguard.io/node-agents: "true" gets
# control-plane tolerations and a critical priority class injected (package daemonguard.inject);
# anywhere else, a DaemonSet may not give them to itself:
#
#   - spec.template.spec.priorityClassName is one of priorityClassNames (system-node-critical,
#     system-cluster-critical), or names a PriorityClass whose value is at or above
#     minDeniedPriority; admission reads that value and passes it as
#     input.priorityClass = {"name": ..., "value": ...} (absent offline, or when the class could
#     not be read: then only the names are checked);
#   - a toleration matches a control-plane taint (key node-role.kubernetes.io/control-plane or
#     node-role.kubernetes.io/master, any operator and effect), or every taint (operator Exists
#     with no key or an empty key).
#
# Namespaces exempt from admission (kube-system, daemonguard's own, the chart's exemptNamespaces)
# never reach the policies: the Go admission core skips them (admission.ExemptNamespaces), so
# there is no exemption list here.
package daemonguard.policies.node_agent_grants

import data.daemonguard.lib

enforcement := "deny"

policy := "node_agent_grants"

# node_agents_label is admission.NodeAgentsLabel (internal/admission/keys.go), the administrator's
# mark on a Namespace; policies/policies_test.go holds the two together.
node_agents_label := "daemonguard.io/node-agents"

marked if lib.namespace_labels[node_agents_label] == "true"

# grant says what the mark would allow, for every message.
grant := sprintf(
	"namespace %s is not marked for node agents: an administrator labels it %s=true to grant this to its DaemonSets",
	[lib.quote(lib.namespace_name), node_agents_label],
)

priority_field := "spec.template.spec.priorityClassName"

priority_class_name := n if {
	n := lib.pod_spec.priorityClassName
	is_string(n)
	n != ""
}

critical_names := n if {
	n := lib.params(policy).priorityClassNames
	is_array(n)
} else := []

min_denied_priority := lib.param_number(policy, "minDeniedPriority")

# priority_value is the value of the named PriorityClass, when admission could read it.
priority_value := v if {
	input.priorityClass.name == priority_class_name
	v := input.priorityClass.value
	is_number(v)
}

violation contains {"field": priority_field, "msg": msg} if {
	not marked
	priority_class_name in critical_names
	msg := sprintf(
		"priorityClassName %s is a system-critical priority class (denied: %s): %s",
		[lib.quote(priority_class_name), concat(", ", [lib.quote(n) | some n in critical_names]), grant],
	)
}

violation contains {"field": priority_field, "msg": msg} if {
	not marked
	not priority_class_name in critical_names
	priority_value >= min_denied_priority
	msg := sprintf(
		"priorityClassName %s has the priority %v, at or above %v: %s",
		[lib.quote(priority_class_name), priority_value, min_denied_priority, grant],
	)
}

# --- tolerations --------------------------------------------------------------------------------

control_plane_keys := {"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"}

tolerations := t if {
	t := lib.pod_spec.tolerations
	is_array(t)
} else := []

# widening lists the tolerations at fault as [index, what it tolerates], in order; the first
# lib.max_reported get a violation each, one more counts the rest.
widening := [[i, what] |
	some i, t in tolerations
	what := tolerates(t)
]

tolerates(t) := sprintf("the control-plane taint %s", [lib.quote(t.key)]) if {
	is_object(t)
	t.key in control_plane_keys
} else := "every taint (operator Exists without a key)" if {
	is_object(t)
	t.operator == "Exists"
	object.get(t, "key", null) in {null, ""}
}

violation contains {"field": sprintf("spec.template.spec.tolerations[%d]", [i]), "msg": msg} if {
	not marked
	some [i, what] in lib.reported(widening)
	msg := sprintf("toleration %s tolerates %s, so the pods may run on control-plane nodes: %s", [lib.quote(tolerations[i]), what, grant])
}

violation contains {"field": "spec.template.spec.tolerations", "msg": msg} if {
	not marked
	msg := lib.more_msg(widening, "tolerations tolerate control-plane taints or every taint")
}
