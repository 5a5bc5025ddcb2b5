package daemonguard.policies.on_delete_managed

review(annotations, strategy) := {
	"operation": "CHECK",
	"object": {
		"apiVersion": "apps/v1",
		"kind": "DaemonSet",
		"metadata": {"name": "agent", "annotations": annotations},
		"spec": {
			"selector": {"matchLabels": {"app": "agent"}},
			"updateStrategy": strategy,
			"template": {"spec": {"containers": [{"name": "agent", "image": "agent:1.0"}]}},
		},
	},
	"namespace": {"name": "apps", "labels": {}},
}

on_delete := {"type": "OnDelete"}

managed := {"daemonguard.io/rollout": "managed"}

test_allows_rolling_update if {
	count(violation) == 0 with input as review({}, {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}})
	count(violation) == 0 with input as review({}, {})
	count(violation) == 0 with input as review(null, null)
	count(violation) == 0 with input as {}
}

test_allows_on_delete_managed_by_daemonguard if {
	count(violation) == 0 with input as review(managed, on_delete)
}

test_allows_on_delete_with_exemption if {
	count(violation) == 0 with input as review({"daemonguard.io/on-delete-exempt": "storage driver, replaced during node maintenance"}, on_delete)
}

test_warns_on_delete_without_controller if {
	vs := violation with input as review({}, on_delete)
	count(vs) == 1
	some v in vs
	v.field == "spec.updateStrategy.type"
	startswith(v.msg, `updateStrategy.type "OnDelete" is not managed by daemonguard: nothing will roll the pods out after a template change`)
	contains(v.msg, `add the annotation daemonguard.io/rollout: "managed"`)
	contains(v.msg, `daemonguard.io/on-delete-exempt: "<reason>"`)
}

test_warns_on_delete_with_wrong_or_empty_annotations if {
	count(violation) == 1 with input as review({"daemonguard.io/rollout": "Managed"}, on_delete)
	count(violation) == 1 with input as review({"daemonguard.io/rollout": true}, on_delete)
	count(violation) == 1 with input as review({"daemonguard.io/on-delete-exempt": ""}, on_delete)
	count(violation) == 1 with input as review({"daemonguard.io/on-delete-exempt": " "}, on_delete)
	count(violation) == 1 with input as review("garbage", on_delete)
}

test_managed_with_rolling_update if {
	vs := violation with input as review(managed, {"type": "RollingUpdate"})
	vs == {{
		"field": "spec.updateStrategy.type",
		"msg": `updateStrategy.type "RollingUpdate" is not allowed with the annotation daemonguard.io/rollout: "managed": the built-in DaemonSet controller would roll the pods itself and fight daemonguard's rollout controller; the only allowed type is "OnDelete"`,
	}}
}

test_managed_with_default_type if {
	vs := violation with input as review(managed, {"rollingUpdate": {"maxUnavailable": 1}})
	count(vs) == 1
	some v in vs
	startswith(v.msg, `updateStrategy.type "RollingUpdate" (the default) is not allowed`)
	count(violation) == 1 with input as review(managed, null)
}

test_managed_with_unknown_type if {
	vs := violation with input as review(managed, {"type": "Foo"})
	count(vs) == 1
	some v in vs
	startswith(v.msg, `updateStrategy.type "Foo" is not allowed`)
}

test_enforcement if {
	enforcement == "warn"
}
