package daemonguard.policies.revision_history

review(spec, ns) := {
	"operation": "CHECK",
	"object": {
		"apiVersion": "apps/v1",
		"kind": "DaemonSet",
		"metadata": {"name": "agent"},
		"spec": object.union(
			{"selector": {"matchLabels": {"app": "agent"}}, "template": {"spec": {"containers": [{"name": "agent", "image": "agent:1.0"}]}}},
			spec,
		),
	},
	"namespace": {"name": ns, "labels": {}},
}

# --- allowed ------------------------------------------------------------------------------------

test_allows_kubernetes_defaults if {
	count(violation) == 0 with input as review({}, "apps")
	count(violation) == 0 with input as review({}, "kube-system")
	count(violation) == 0 with input as review({"revisionHistoryLimit": null, "minReadySeconds": null}, "apps")
	count(violation) == 0 with input as {}
	count(violation) == 0 with input as {"object": {"spec": "garbage"}}
}

test_allows_bounds_of_default_class if {
	count(violation) == 0 with input as review({"revisionHistoryLimit": 2}, "apps")
	count(violation) == 0 with input as review({"revisionHistoryLimit": 20, "minReadySeconds": 30}, "apps")
}

test_allows_bounds_of_system_class if {
	count(violation) == 0 with input as review({"revisionHistoryLimit": 5}, "kube-system")
	count(violation) == 0 with input as review({"revisionHistoryLimit": 30}, "kube-system")
}

# --- revisionHistoryLimit -----------------------------------------------------------------------

test_denies_limit_below_minimum if {
	vs := violation with input as review({"revisionHistoryLimit": 1}, "apps")
	vs == {{
		"field": "spec.revisionHistoryLimit",
		"msg": "revisionHistoryLimit 1 is below the allowed minimum of 2 for namespace class \"default\" (allowed: an integer from 2 to 20): `kubectl rollout undo` needs old revisions to go back to",
	}}
	count(violation) == 1 with input as review({"revisionHistoryLimit": 0}, "apps")
}

test_denies_limit_above_maximum if {
	vs := violation with input as review({"revisionHistoryLimit": 21}, "apps")
	vs == {{
		"field": "spec.revisionHistoryLimit",
		"msg": `revisionHistoryLimit 21 exceeds the allowed maximum of 20 for namespace class "default" (allowed: an integer from 2 to 20): every kept revision is a ControllerRevision object stored in etcd`,
	}}
}

test_system_class_bounds if {
	vs := violation with input as review({"revisionHistoryLimit": 4}, "kube-system")
	count(vs) == 1
	some v in vs
	startswith(v.msg, `revisionHistoryLimit 4 is below the allowed minimum of 5 for namespace class "system" (allowed: an integer from 5 to 30)`)
	count(violation) == 1 with input as review({"revisionHistoryLimit": 31}, "kube-system")
	count(violation) == 0 with input as review({"revisionHistoryLimit": 25}, "kube-system")
}

test_default_limit_named_as_default if {
	vs := violation with input as review({}, "apps") with data.daemonguard.parameters.policies.revision_history.default.maxRevisionHistoryLimit as 5
	count(vs) == 1
	some v in vs
	startswith(v.msg, "revisionHistoryLimit 10 (the default) exceeds the allowed maximum of 5")
}

test_denies_garbage_limit if {
	every value in ["10", "abc", -1, 2.5, true, {}] {
		vs := violation with input as review({"revisionHistoryLimit": value}, "apps")
		count(vs) == 1
		some v in vs
		v.field == "spec.revisionHistoryLimit"
		v.msg == sprintf("revisionHistoryLimit %s is not a non-negative integer (allowed: an integer from 2 to 20)", [data.daemonguard.lib.quote(value)])
	}
}

test_limit_range_text_with_missing_parameters if {
	msgs := {v.msg | some v in violation} with input as review({"revisionHistoryLimit": "x"}, "apps")
		with data.daemonguard.parameters as {"policies": {"revision_history": {"default": {"minRevisionHistoryLimit": 2}}}}
	msgs == {`revisionHistoryLimit "x" is not a non-negative integer (allowed: an integer of at least 2)`}
	count(violation) == 0 with input as review({"revisionHistoryLimit": 1000}, "apps")
		with data.daemonguard.parameters as {}
}

# --- minReadySeconds ----------------------------------------------------------------------------

test_min_ready_seconds_parameter if {
	params := {"default": {"minRevisionHistoryLimit": 2, "maxRevisionHistoryLimit": 20, "minReadySeconds": 10}}
	vs := violation with input as review({"minReadySeconds": 5}, "apps")
		with data.daemonguard.parameters.policies.revision_history as params
	vs == {{
		"field": "spec.minReadySeconds",
		"msg": `minReadySeconds 5 is below the allowed minimum of 10 for namespace class "default" (allowed: 10 or more): a new pod must stay ready that long before the rollout moves on to the next nodes`,
	}}
	vs2 := violation with input as review({}, "apps")
		with data.daemonguard.parameters.policies.revision_history as params
	some v in vs2
	startswith(v.msg, "minReadySeconds 0 (the default) is below the allowed minimum of 10")
	count(violation) == 0 with input as review({"minReadySeconds": 10}, "apps")
		with data.daemonguard.parameters.policies.revision_history as params
}

test_denies_garbage_min_ready_seconds if {
	vs := violation with input as review({"minReadySeconds": "10s"}, "apps")
	vs == {{
		"field": "spec.minReadySeconds",
		"msg": `minReadySeconds "10s" is not a non-negative integer (allowed: an integer of at least 0)`,
	}}
	count(violation) == 1 with input as review({"minReadySeconds": -5}, "apps")
}

test_both_fields_reported if {
	vs := violation with input as review({"revisionHistoryLimit": 0, "minReadySeconds": "x"}, "apps")
	{v.field | some v in vs} == {"spec.revisionHistoryLimit", "spec.minReadySeconds"}
}

test_enforcement if {
	enforcement == "deny"
}
