package daemonguard.inject

review(metadata, ns) := {
	"operation": "CREATE",
	"object": {
		"apiVersion": "apps/v1",
		"kind": "DaemonSet",
		"metadata": object.union({"name": "agent"}, metadata),
		"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "agent:1.0"}]}}},
	},
	"namespace": {"name": ns, "labels": {}},
}

default_tolerations := [
	{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
	{"key": "node-role.kubernetes.io/master", "operator": "Exists", "effect": "NoSchedule"},
]

test_injects_defaults if {
	decision == {
		"inject": true,
		"tolerations": default_tolerations,
		"priorityClassName": "system-node-critical",
	} with input as review({}, "apps")
}

test_injects_without_namespace_or_object if {
	decision.inject with input as {"operation": "CHECK", "object": {}}
	decision.inject with input as {}
	decision.inject with input as review({"annotations": "garbage", "labels": null}, "apps")
}

test_inject_true_annotation_changes_nothing if {
	decision.inject with input as review({"annotations": {"daemonguard.io/inject": "true"}}, "apps")
}

test_opt_out_annotation if {
	decision == {"inject": false, "reason": `the DaemonSet opts out with the annotation daemonguard.io/inject: "false"`} with input as review({"annotations": {"daemonguard.io/inject": "false"}}, "apps")
	decision.inject with input as review({"annotations": {"daemonguard.io/inject": false}}, "apps")
	decision.inject with input as review({"annotations": {"daemonguard.io/inject": "False"}}, "apps")
}

test_excluded_namespace if {
	d := decision with input as review({}, "monitoring")
		with data.daemonguard.parameters.inject.excludedNamespaces as ["logging", "monitoring"]
	d == {"inject": false, "reason": `namespace "monitoring" is in inject.excludedNamespaces`}
	decision.inject with input as review({}, "apps")
		with data.daemonguard.parameters.inject.excludedNamespaces as ["logging", "monitoring"]
}

test_excluded_labels if {
	labels := {"app.kubernetes.io/managed-by": "operator", "team": "x"}
	d := decision with input as review({"labels": object.union(labels, {"extra": "y"})}, "apps")
		with data.daemonguard.parameters.inject.excludedLabels as labels
	not d.inject
	startswith(d.reason, "the DaemonSet's labels match inject.excludedLabels")
	decision.inject with input as review({"labels": {"team": "x"}}, "apps")
		with data.daemonguard.parameters.inject.excludedLabels as labels
}

test_empty_excluded_labels_exclude_nothing if {
	decision.inject with input as review({"labels": {}}, "apps")
	decision.inject with input as review({"labels": {"a": "b"}}, "apps")
}

test_first_reason_wins if {
	d := decision with input as review({"annotations": {"daemonguard.io/inject": "false"}}, "monitoring")
		with data.daemonguard.parameters.inject.excludedNamespaces as ["monitoring"]
	startswith(d.reason, "the DaemonSet opts out")
}

test_empty_priority_class_is_omitted if {
	decision == {"inject": true, "tolerations": default_tolerations} with input as review({}, "apps")
		with data.daemonguard.parameters.inject.priorityClassName as ""
	decision == {"inject": true, "tolerations": default_tolerations} with input as review({}, "apps")
		with data.daemonguard.parameters.inject.priorityClassName as 5
}

test_custom_tolerations_skip_garbage_entries if {
	d := decision with input as review({}, "apps")
		with data.daemonguard.parameters.inject.tolerations as [{"key": "dedicated", "operator": "Exists"}, "garbage"]
	d.tolerations == [{"key": "dedicated", "operator": "Exists"}]
	d.priorityClassName == "system-node-critical"
}

test_nothing_to_inject if {
	d := decision with input as review({}, "apps")
		with data.daemonguard.parameters.inject.tolerations as []
		with data.daemonguard.parameters.inject.priorityClassName as ""
	d == {"inject": false, "reason": "nothing to inject: inject.tolerations is empty and inject.priorityClassName is empty"}
}

test_only_priority_class if {
	d := decision with input as review({}, "apps")
		with data.daemonguard.parameters.inject.tolerations as "garbage"
	d == {"inject": true, "tolerations": [], "priorityClassName": "system-node-critical"}
}

test_disabled if {
	d := decision with input as review({}, "apps")
		with data.daemonguard.parameters.inject.enabled as false
	d == {"inject": false, "reason": `injection is disabled (inject.enabled: false) for namespace class "default"`}
	decision.inject with input as review({}, "apps")
		with data.daemonguard.parameters.inject.enabled as "false"
}

test_namespace_class_overrides if {
	overrides := {"system": {"priorityClassName": ""}, "default": {"enabled": false}}

	# kube-system is in class "system" in parameters.yaml (Go never sends it, but the class logic
	# is the same for any namespace listed there).
	decision == {"inject": true, "tolerations": default_tolerations} with input as review({}, "kube-system")
		with data.daemonguard.parameters.inject.namespaceClasses as overrides
	not decision.inject with input as review({}, "apps")
		with data.daemonguard.parameters.inject.namespaceClasses as overrides
}

test_class_can_reenable if {
	d := decision with input as review({}, "kube-system")
		with data.daemonguard.parameters.inject.enabled as false
		with data.daemonguard.parameters.inject.namespaceClasses as {"system": {"enabled": true}}
	d.inject
}

test_garbage_parameters if {
	decision == {"inject": false, "reason": "nothing to inject: inject.tolerations is empty and inject.priorityClassName is empty"} with input as review({}, "apps")
		with data.daemonguard.parameters as {}
	decision.inject == false with input as review({}, "apps")
		with data.daemonguard.parameters.inject as "garbage"
	decision.inject with input as review({}, "apps")
		with data.daemonguard.parameters.inject.namespaceClasses as "garbage"
		with data.daemonguard.parameters.inject.excludedNamespaces as "apps"
		with data.daemonguard.parameters.inject.excludedLabels as ["garbage"]
}
