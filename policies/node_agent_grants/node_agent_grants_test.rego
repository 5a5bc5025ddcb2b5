package daemonguard.policies.node_agent_grants

# review(namespace_labels, pod_spec) is a CREATE of a DaemonSet with pod_spec in namespace team-a.
review(namespace_labels, pod_spec) := {
	"operation": "CREATE",
	"object": {
		"apiVersion": "apps/v1",
		"kind": "DaemonSet",
		"metadata": {"name": "agent", "namespace": "team-a"},
		"spec": {"template": {"spec": object.union({"containers": [{"name": "agent"}]}, pod_spec)}},
	},
	"namespace": {"name": "team-a", "labels": namespace_labels},
	"cluster": {"nodes": 5, "matchingNodes": 5},
}

marked_labels := {"daemonguard.io/node-agents": "true"}

unmarked_labels := {"team": "a"}

grant_text := `namespace "team-a" is not marked for node agents: an administrator labels it daemonguard.io/node-agents=true to grant this to its DaemonSets`

with_class(review_input, class) := object.union(review_input, {"priorityClass": class})

exists_everything := {"operator": "Exists"}

control_plane := {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}

# Each case: the input, and the fields of the expected violations (empty: allowed).
cases := {
	"a plain DaemonSet in an unmarked namespace is allowed": {
		"input": review(unmarked_labels, {}),
		"fields": set(),
	},
	"system-node-critical in a marked namespace is allowed": {
		"input": review(marked_labels, {"priorityClassName": "system-node-critical", "tolerations": [exists_everything, control_plane]}),
		"fields": set(),
	},
	"the mark must be the string true": {
		"input": review({"daemonguard.io/node-agents": "yes"}, {"priorityClassName": "system-node-critical"}),
		"fields": {"spec.template.spec.priorityClassName"},
	},
	"system-node-critical in an unmarked namespace is denied": {
		"input": review(unmarked_labels, {"priorityClassName": "system-node-critical"}),
		"fields": {"spec.template.spec.priorityClassName"},
	},
	"system-cluster-critical in an unmarked namespace is denied": {
		"input": review({}, {"priorityClassName": "system-cluster-critical"}),
		"fields": {"spec.template.spec.priorityClassName"},
	},
	"an ordinary priority class without input.priorityClass is allowed": {
		"input": review(unmarked_labels, {"priorityClassName": "high"}),
		"fields": set(),
	},
	"a priority value below the threshold is allowed": {
		"input": with_class(review(unmarked_labels, {"priorityClassName": "high"}), {"name": "high", "value": 999999999}),
		"fields": set(),
	},
	"a priority value at the threshold is denied": {
		"input": with_class(review(unmarked_labels, {"priorityClassName": "high"}), {"name": "high", "value": 1000000000}),
		"fields": {"spec.template.spec.priorityClassName"},
	},
	"a priority value above the threshold is denied": {
		"input": with_class(review(unmarked_labels, {"priorityClassName": "high"}), {"name": "high", "value": 2000001000}),
		"fields": {"spec.template.spec.priorityClassName"},
	},
	"a priority value at the threshold in a marked namespace is allowed": {
		"input": with_class(review(marked_labels, {"priorityClassName": "high"}), {"name": "high", "value": 1000000000}),
		"fields": set(),
	},
	"the value of another class than the one named is not used": {
		"input": with_class(review(unmarked_labels, {"priorityClassName": "high"}), {"name": "other", "value": 2000000000}),
		"fields": set(),
	},
	"a malformed input.priorityClass is ignored": {
		"input": with_class(review(unmarked_labels, {"priorityClassName": "high"}), {"name": "high", "value": "2000000000"}),
		"fields": set(),
	},
	"Exists without a key tolerates every taint": {
		"input": review(unmarked_labels, {"tolerations": [{"key": "gpu", "operator": "Exists"}, exists_everything]}),
		"fields": {"spec.template.spec.tolerations[1]"},
	},
	"Exists with an empty key and an effect tolerates every taint of that effect": {
		"input": review(unmarked_labels, {"tolerations": [{"key": "", "operator": "Exists", "effect": "NoSchedule"}]}),
		"fields": {"spec.template.spec.tolerations[0]"},
	},
	"the control-plane toleration is denied, any operator and effect": {
		"input": review(unmarked_labels, {"tolerations": [
			control_plane,
			{"key": "node-role.kubernetes.io/master", "operator": "Equal", "value": "", "effect": "NoExecute"},
		]}),
		"fields": {"spec.template.spec.tolerations[0]", "spec.template.spec.tolerations[1]"},
	},
	"other tolerations and garbage are allowed": {
		"input": review(unmarked_labels, {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}, "garbage", {"operator": "Equal"}]}),
		"fields": set(),
	},
	"tolerations that are not a list are ignored": {
		"input": review(unmarked_labels, {"tolerations": "garbage", "priorityClassName": 5}),
		"fields": set(),
	},
	"offline, labels unknown, a system class is denied": {
		"input": object.union(review({}, {"priorityClassName": "system-node-critical"}), {"operation": "CHECK", "cluster": null}),
		"fields": {"spec.template.spec.priorityClassName"},
	},
}

test_cases if {
	every _, c in cases {
		{v.field | some v in violation with input as c.input} == c.fields
	}
}

test_no_input if {
	count(violation) == 0 with input as {}
}

test_messages if {
	violation == {{
		"field": "spec.template.spec.priorityClassName",
		"msg": concat("", [`priorityClassName "system-node-critical" is a system-critical priority class (denied: "system-node-critical", "system-cluster-critical"): `, grant_text]),
	}} with input as review(unmarked_labels, {"priorityClassName": "system-node-critical"})

	violation == {{
		"field": "spec.template.spec.priorityClassName",
		"msg": concat("", [`priorityClassName "high" has the priority 2000000000, at or above 1000000000: `, grant_text]),
	}} with input as with_class(review(unmarked_labels, {"priorityClassName": "high"}), {"name": "high", "value": 2000000000})

	violation == {
		{
			"field": "spec.template.spec.tolerations[0]",
			"msg": concat("", [`toleration {"operator": "Exists"} tolerates every taint (operator Exists without a key), so the pods may run on control-plane nodes: `, grant_text]),
		},
		{
			"field": "spec.template.spec.tolerations[1]",
			"msg": concat("", [`toleration {"effect": "NoSchedule", "key": "node-role.kubernetes.io/control-plane", "operator": "Exists"} tolerates the control-plane taint "node-role.kubernetes.io/control-plane", so the pods may run on control-plane nodes: `, grant_text]),
		},
	} with input as review(unmarked_labels, {"tolerations": [exists_everything, control_plane]})
}

test_parameters_override if {
	count(violation) == 0 with input as review(unmarked_labels, {"priorityClassName": "system-node-critical"})
		with data.daemonguard.parameters.policies.node_agent_grants.default.priorityClassNames as []
	count(violation) == 1 with input as review(unmarked_labels, {"priorityClassName": "agents"})
		with data.daemonguard.parameters.policies.node_agent_grants.default.priorityClassNames as ["agents"]
	count(violation) == 0 with input as with_class(review(unmarked_labels, {"priorityClassName": "high"}), {"name": "high", "value": 1000000000})
		with data.daemonguard.parameters.policies.node_agent_grants.default.minDeniedPriority as 1000000001
}

# A hostile pod template: 5,000 tolerations of every taint get three violations and one count.
test_thousands_of_tolerations if {
	vs := violation with input as review(unmarked_labels, {"tolerations": [exists_everything | some _ in numbers.range(1, 5000)]})
	{v.field | some v in vs} == {
		"spec.template.spec.tolerations[0]",
		"spec.template.spec.tolerations[1]",
		"spec.template.spec.tolerations[2]",
		"spec.template.spec.tolerations",
	}
	some v in vs
	v.msg == "and 4997 more tolerations tolerate control-plane taints or every taint (only the first 3 are reported)"
}

test_huge_values_are_cut if {
	name := concat("", ["system-node-critical", concat("", ["x" | some _ in numbers.range(1, 60000)])])
	vs := violation with input as with_class(review(unmarked_labels, {"priorityClassName": name}), {"name": name, "value": 2000000000})
	count(vs) == 1
	every v in vs {
		count(v.msg) < 500
	}
}

test_enforcement if {
	enforcement == "deny"
}
