package daemonguard.policies.rolling_update_budget

# --- fixtures -----------------------------------------------------------------------------------

agent := {"name": "agent", "image": "agent:1.0"}

daemonset(strategy, pod) := {
	"apiVersion": "apps/v1",
	"kind": "DaemonSet",
	"metadata": {"name": "agent", "namespace": "apps"},
	"spec": {
		"selector": {"matchLabels": {"app": "agent"}},
		"updateStrategy": strategy,
		"template": {"metadata": {"labels": {"app": "agent"}}, "spec": pod},
	},
}

# review(strategy) is the input of an offline check (no input.cluster) in namespace "apps".
review(strategy) := {
	"operation": "CHECK",
	"object": daemonset(strategy, {"containers": [agent]}),
	"namespace": {"name": "apps", "labels": {}},
}

# live(strategy, ns, nodes) is an admission input with matchingNodes known.
live(strategy, ns, nodes) := {
	"operation": "CREATE",
	"object": daemonset(strategy, {"containers": [agent]}),
	"namespace": {"name": ns, "labels": {}},
	"cluster": {"nodes": nodes + 2, "matchingNodes": nodes},
}

with_pod(strategy, pod) := {
	"operation": "CHECK",
	"object": daemonset(strategy, pod),
	"namespace": {"name": "apps", "labels": {}},
}

rolling(ru) := {"type": "RollingUpdate", "rollingUpdate": ru}

mu_field := "spec.updateStrategy.rollingUpdate.maxUnavailable"

ms_field := "spec.updateStrategy.rollingUpdate.maxSurge"

fields(vs) := {v.field | some v in vs}

# --- allowed ------------------------------------------------------------------------------------

test_allows_max_unavailable_1 if {
	count(violation) == 0 with input as review(rolling({"maxUnavailable": 1}))
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 1}), "apps", 3)
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 1}), "kube-system", 1)
}

test_allows_absent_strategy_kubernetes_defaults if {
	count(violation) == 0 with input as review({})
	count(violation) == 0 with input as review(null)
	count(violation) == 0 with input as review({"type": "RollingUpdate"})
	count(violation) == 0 with input as review({"rollingUpdate": {"maxUnavailable": null, "maxSurge": null}})
	count(violation) == 0 with input as {"operation": "CHECK"}
	count(violation) == 0 with input as {}
}

test_allows_odd_shapes_as_defaults if {
	count(violation) == 0 with input as review("garbage")
	count(violation) == 0 with input as review(rolling("garbage"))
	count(violation) == 0 with input as {"object": {"spec": "garbage"}}
}

test_ignores_on_delete_and_unknown_types if {
	count(violation) == 0 with input as review({"type": "OnDelete", "rollingUpdate": {"maxUnavailable": "abc", "maxSurge": "abc"}})
	count(violation) == 0 with input as review({"type": "Foo", "rollingUpdate": {"maxUnavailable": 0}})
}

test_allows_percent_within_bounds if {
	count(violation) == 0 with input as review(rolling({"maxUnavailable": "50%"}))
	count(violation) == 0 with input as review(rolling({"maxUnavailable": "0%", "maxSurge": "100%"}))
	count(violation) == 0 with input as live(rolling({"maxUnavailable": "50%"}), "apps", 3)
	count(violation) == 0 with input as live(rolling({"maxUnavailable": "25%"}), "kube-system", 3)
}

test_allows_surge_without_host_ports if {
	count(violation) == 0 with input as review(rolling({"maxUnavailable": 0, "maxSurge": 1}))
	count(violation) == 0 with input as review(rolling({"maxUnavailable": "0%", "maxSurge": "10%"}))
	pod := {"containers": [{"name": "web", "ports": [{"containerPort": 8080}, {"containerPort": 9090, "hostPort": 0}]}]}
	count(violation) == 0 with input as with_pod(rolling({"maxUnavailable": 0, "maxSurge": 1}), pod)
}

test_allows_host_ports_without_surge if {
	pod := {"containers": [{"name": "exporter", "ports": [{"containerPort": 9100, "hostPort": 9100}]}]}
	count(violation) == 0 with input as with_pod(rolling({"maxUnavailable": 1, "maxSurge": 0}), pod)
	count(violation) == 0 with input as with_pod(rolling({"maxUnavailable": 1}), pod)
	count(violation) == 0 with input as with_pod({}, pod)
}

# --- (a) malformed values -----------------------------------------------------------------------

test_denies_garbage_max_unavailable if {
	vs := violation with input as review(rolling({"maxUnavailable": "abc"}))
	vs == {{
		"field": mu_field,
		"msg": `maxUnavailable "abc" is not valid: it must be a non-negative integer (e.g. 1) or a percentage string "N%" with N from 0 to 100 (e.g. "10%")`,
	}}
}

test_denies_malformed_max_unavailable_values if {
	every value in ["5", "", "150%", "101%", "-1%", "5.5%", -1, 1.5, true, [1], {"a": 1}] {
		vs := violation with input as review(rolling({"maxUnavailable": value}))
		fields(vs) == {mu_field}
		some v in vs
		startswith(v.msg, sprintf("maxUnavailable %s is not valid", [data.daemonguard.lib.quote(value)]))
	}
}

test_denies_malformed_max_surge if {
	vs := violation with input as review(rolling({"maxUnavailable": 0, "maxSurge": "1"}))
	count(vs) == 1
	some v in vs
	v.field == ms_field
	startswith(v.msg, `maxSurge "1" is not valid: it must be a non-negative integer`)
}

test_malformed_values_skip_dependent_checks if {
	# No "both zero" or bounds message on top of the format message.
	vs := violation with input as live(rolling({"maxUnavailable": "abc", "maxSurge": 0}), "apps", 2)
	count(vs) == 1
}

# --- (b) zero budget ----------------------------------------------------------------------------

test_denies_zero_budget_with_default_surge if {
	vs := violation with input as review(rolling({"maxUnavailable": 0}))
	vs == {{
		"field": "spec.updateStrategy.rollingUpdate",
		"msg": "maxUnavailable 0 and maxSurge 0 (the default) are both zero, so no pod could ever be updated: set maxUnavailable to at least 1 (or maxSurge above 0 when no container uses a hostPort)",
	}}
}

test_denies_zero_budget_percent if {
	vs := violation with input as review(rolling({"maxUnavailable": "0%", "maxSurge": "0%"}))
	count(vs) == 1
	some v in vs
	startswith(v.msg, `maxUnavailable "0%" and maxSurge "0%" are both zero`)
}

# --- both non-zero (rejected by Kubernetes) -----------------------------------------------------

test_denies_surge_with_default_max_unavailable if {
	vs := violation with input as review(rolling({"maxSurge": 1}))
	vs == {{
		"field": ms_field,
		"msg": "maxSurge 1 may not be set while maxUnavailable 1 (the default) is non-zero: exactly one of them must be non-zero; to surge, set maxUnavailable to 0",
	}}
}

test_denies_surge_with_explicit_max_unavailable if {
	vs := violation with input as review(rolling({"maxUnavailable": "10%", "maxSurge": "10%"}))
	count(vs) == 1
	some v in vs
	startswith(v.msg, `maxSurge "10%" may not be set while maxUnavailable "10%" is non-zero`)
}

# --- (c) surge with host ports ------------------------------------------------------------------

test_denies_surge_with_host_port if {
	pod := {"containers": [{"name": "exporter", "ports": [{"containerPort": 9100, "hostPort": 9100}]}]}
	vs := violation with input as with_pod(rolling({"maxUnavailable": 0, "maxSurge": 1}), pod)
	vs == {{
		"field": ms_field,
		"msg": `maxSurge 1 must be 0 because the pod binds host ports (container "exporter" hostPort 9100): a surge pod can never start next to the old pod on the same node, so the rollout would hang; use maxSurge 0 and maxUnavailable of at least 1`,
	}}
}

test_denies_surge_with_host_ports_of_init_containers_and_several_ports if {
	pod := {
		"initContainers": [{"name": "setup", "ports": [{"containerPort": 7000, "hostPort": 7001}]}],
		"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 80}, {"containerPort": 443, "hostPort": 8443}]}],
	}
	vs := violation with input as with_pod(rolling({"maxUnavailable": "0%", "maxSurge": "20%"}), pod)
	count(vs) == 1
	some v in vs
	contains(v.msg, `(container "setup" hostPort 7001, container "b" hostPort 8443)`)
}

test_denies_surge_with_host_network_container_ports if {
	pod := {"hostNetwork": true, "containers": [{"name": "cni", "ports": [{"containerPort": 9099}]}]}
	vs := violation with input as with_pod(rolling({"maxUnavailable": 0, "maxSurge": 1}), pod)
	count(vs) == 1
	some v in vs
	contains(v.msg, `(container "cni" hostPort 9099)`)
}

# A hostile pod template: thousands of host ports are named three at a time.
test_thousands_of_host_ports_are_counted if {
	pod := {"containers": [{"name": sprintf("c%d", [i]), "ports": [{"hostPort": i}]} | some i in numbers.range(1, 5000)]}
	vs := violation with input as with_pod(rolling({"maxUnavailable": 0, "maxSurge": 1}), pod)
	count(vs) == 1
	some v in vs
	contains(v.msg, `(container "c1" hostPort 1, container "c2" hostPort 2, container "c3" hostPort 3, and 4997 more host ports (only the first 3 are reported))`)
	count(v.msg) < 500
}

test_host_port_check_tolerates_garbage_ports if {
	pod := {"containers": [{"name": "x", "ports": "garbage"}, {"name": "y", "ports": ["garbage", {"hostPort": "80"}]}]}
	count(violation) == 0 with input as with_pod(rolling({"maxUnavailable": 0, "maxSurge": 1}), pod)
}

# --- (d) bounds per namespace class -------------------------------------------------------------

test_denies_percent_above_default_class_maximum if {
	vs := violation with input as review(rolling({"maxUnavailable": "100%"}))
	vs == {{
		"field": mu_field,
		"msg": `maxUnavailable "100%" exceeds the allowed maximum of 50% for namespace class "default" (allowed: 0% to 50%, or an integer node count)`,
	}}
}

test_denies_percent_above_system_class_maximum if {
	vs := violation with input as review(rolling({"maxUnavailable": "30%"})) with input.namespace.name as "kube-system"
	count(vs) == 1
	some v in vs
	v.msg == `maxUnavailable "30%" exceeds the allowed maximum of 25% for namespace class "system" (allowed: 0% to 25%, or an integer node count)`
}

test_percent_boundary if {
	count(violation) == 0 with input as review(rolling({"maxUnavailable": "50%"}))
	count(violation) == 1 with input as review(rolling({"maxUnavailable": "51%"}))
}

test_integer_not_checked_offline if {
	count(violation) == 0 with input as review(rolling({"maxUnavailable": 50}))
}

test_integer_against_matching_nodes if {
	# 10 nodes * 50% = 5.
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 5}), "apps", 10)
	vs := violation with input as live(rolling({"maxUnavailable": 5}), "apps", 9)
	vs == {{
		"field": mu_field,
		"msg": `maxUnavailable 5 exceeds the allowed maximum of 4 for namespace class "default": the DaemonSet runs on 9 matching nodes and at most 50% of them (at least 1) may be unavailable at once (allowed: 0 to 4, or a percentage up to 50%)`,
	}}
}

test_integer_allows_at_least_one_node if {
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 1}), "apps", 1)
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 1}), "apps", 0)
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 1}), "kube-system", 3)
	vs := violation with input as live(rolling({"maxUnavailable": 2}), "apps", 1)
	count(vs) == 1
	some v in vs
	contains(v.msg, "allowed maximum of 1 ")
	contains(v.msg, "runs on 1 matching nodes")
}

test_integer_system_class if {
	# 8 nodes * 25% = 2.
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 2}), "kube-system", 8)
	vs := violation with input as live(rolling({"maxUnavailable": 3}), "kube-system", 8)
	count(vs) == 1
	some v in vs
	contains(v.msg, `allowed maximum of 2 for namespace class "system"`)
}

test_integer_ignores_garbage_matching_nodes if {
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 9}), "apps", 3) with input.cluster.matchingNodes as "3"
}

test_parameters_override if {
	count(violation) == 1 with input as review(rolling({"maxUnavailable": "20%"}))
		with data.daemonguard.parameters.policies.rolling_update_budget.default.maxUnavailablePercent as 10
	count(violation) == 0 with input as review(rolling({"maxUnavailable": "100%"}))
		with data.daemonguard.parameters.policies.rolling_update_budget.default.maxUnavailablePercent as 100
}

test_missing_or_garbage_parameter_skips_bounds if {
	count(violation) == 0 with input as review(rolling({"maxUnavailable": "100%"})) with data.daemonguard.parameters as {}
	count(violation) == 0 with input as live(rolling({"maxUnavailable": 100}), "apps", 3)
		with data.daemonguard.parameters.policies.rolling_update_budget.default.maxUnavailablePercent as "50"
}

test_enforcement if {
	enforcement == "deny"
}
