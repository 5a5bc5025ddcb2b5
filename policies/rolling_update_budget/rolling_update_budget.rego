# rolling_update_budget: a RollingUpdate DaemonSet must have a rolling-update budget that can make
# progress and does not take too many nodes down at once.
#
#   (a) maxUnavailable and maxSurge are a non-negative integer or a string "N%" with 0 <= N <= 100;
#   (b) they are not both zero (nothing could ever be updated), nor both non-zero (Kubernetes
#       rejects that; surging needs maxUnavailable: 0 written out, since it defaults to 1);
#   (c) maxSurge is zero when a container or init container binds a host port (hostPort, or a
#       containerPort under hostNetwork): the surge pod could never start next to the old one;
#   (d) maxUnavailable stays within the namespace class's maxUnavailablePercent: a "N%" value is
#       compared directly; an integer only when input.cluster.matchingNodes is known, against
#       max(1, floor(matchingNodes * maxUnavailablePercent / 100)).
#
# Absent values take the Kubernetes defaults: type RollingUpdate, maxUnavailable 1, maxSurge 0.
package daemonguard.policies.rolling_update_budget

import data.daemonguard.lib

enforcement := "deny"

rolling_update_field := "spec.updateStrategy.rollingUpdate"

max_unavailable_field := "spec.updateStrategy.rollingUpdate.maxUnavailable"

max_surge_field := "spec.updateStrategy.rollingUpdate.maxSurge"

applies if lib.strategy_type == "RollingUpdate"

# The raw values, with the Kubernetes defaults when absent or null.
max_unavailable := v if {
	v := lib.rolling_update.maxUnavailable
	v != null
} else := 1

max_surge := v if {
	v := lib.rolling_update.maxSurge
	v != null
} else := 0

# Parsed values; undefined when malformed.
parsed_max_unavailable := lib.int_or_percent(max_unavailable)

parsed_max_surge := lib.int_or_percent(max_surge)

format_hint := `a non-negative integer (e.g. 1) or a percentage string "N%" with N from 0 to 100 (e.g. "10%")`

# (a) well-formed values.
violation contains {"field": max_unavailable_field, "msg": msg} if {
	applies
	not parsed_max_unavailable
	msg := sprintf("maxUnavailable %s is not valid: it must be %s", [lib.quote(max_unavailable), format_hint])
}

violation contains {"field": max_surge_field, "msg": msg} if {
	applies
	not parsed_max_surge
	msg := sprintf("maxSurge %s is not valid: it must be %s", [lib.quote(max_surge), format_hint])
}

# (b) a budget of zero.
violation contains {"field": rolling_update_field, "msg": msg} if {
	applies
	parsed_max_unavailable.value == 0
	parsed_max_surge.value == 0
	msg := sprintf(
		"maxUnavailable %s and maxSurge %s%s are both zero, so no pod could ever be updated: set maxUnavailable to at least 1 (or maxSurge above 0 when no container uses a hostPort)",
		[lib.quote(max_unavailable), lib.quote(max_surge), surge_default_note],
	)
}

violation contains {"field": max_surge_field, "msg": msg} if {
	applies
	parsed_max_unavailable.value > 0
	parsed_max_surge.value > 0
	msg := sprintf(
		"maxSurge %s may not be set while maxUnavailable %s%s is non-zero: exactly one of them must be non-zero; to surge, set maxUnavailable to 0",
		[lib.quote(max_surge), lib.quote(max_unavailable), unavailable_default_note],
	)
}

unavailable_default_note := " (the default)" if {
	not lib.has_value(lib.rolling_update, "maxUnavailable")
} else := ""

surge_default_note := " (the default)" if {
	not lib.has_value(lib.rolling_update, "maxSurge")
} else := ""

# (c) surge with host ports. With hostNetwork, every containerPort is a host port (Kubernetes
# defaults hostPort to containerPort). host_ports lists them as [container name, port]; the
# message names the first lib.max_reported and counts the rest.
host_ports := [[c.name, port] |
	some c in lib.containers
	ports := c.container.ports
	is_array(ports)
	some p in ports
	port := host_port(p)
]

host_ports_text := concat(", ", array.concat(
	[sprintf("container %s hostPort %v", [lib.quote(hp[0]), hp[1]]) | some hp in lib.reported(host_ports)],
	[more | more := lib.more_msg(host_ports, "host ports")],
))

host_port(p) := p.hostPort if {
	is_object(p)
	lib.is_integer(p.hostPort)
	p.hostPort > 0
} else := p.containerPort if {
	is_object(p)
	lib.pod_spec.hostNetwork == true
	lib.is_integer(p.containerPort)
	p.containerPort > 0
}

violation contains {"field": max_surge_field, "msg": msg} if {
	applies
	parsed_max_surge.value > 0
	count(host_ports) > 0
	msg := sprintf(
		"maxSurge %s must be 0 because the pod binds host ports (%s): a surge pod can never start next to the old pod on the same node, so the rollout would hang; use maxSurge 0 and maxUnavailable of at least 1",
		[lib.quote(max_surge), host_ports_text],
	)
}

# (d) bounds per namespace class.
max_percent := lib.param_number("rolling_update_budget", "maxUnavailablePercent")

violation contains {"field": max_unavailable_field, "msg": msg} if {
	applies
	parsed_max_unavailable.type == "percent"
	parsed_max_unavailable.value > max_percent
	msg := sprintf(
		"maxUnavailable %s exceeds the allowed maximum of %v%% for namespace class %q (allowed: 0%% to %v%%, or an integer node count)",
		[lib.quote(max_unavailable), max_percent, lib.namespace_class, max_percent],
	)
}

# allowed_nodes is the largest integer maxUnavailable for the nodes the DaemonSet runs on.
allowed_nodes := max([1, floor((lib.matching_nodes * max_percent) / 100)])

# An integer maxUnavailable of 1, the Kubernetes default, is always within the bound, which is at
# least 1: only a larger one needs the bound, and the class's parameters and node count behind it.
violation contains {"field": max_unavailable_field, "msg": msg} if {
	applies
	parsed_max_unavailable.type == "int"
	parsed_max_unavailable.value > 1
	parsed_max_unavailable.value > allowed_nodes
	msg := sprintf(
		"maxUnavailable %v exceeds the allowed maximum of %v for namespace class %q: the DaemonSet runs on %v matching nodes and at most %v%% of them (at least 1) may be unavailable at once (allowed: 0 to %v, or a percentage up to %v%%)",
		[max_unavailable, allowed_nodes, lib.namespace_class, lib.matching_nodes, max_percent, allowed_nodes, max_percent],
	)
}
