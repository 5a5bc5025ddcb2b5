# revision_history: a DaemonSet keeps enough ControllerRevisions for `kubectl rollout undo` and
# not so many that they pile up in etcd, and new pods stay ready long enough before the rollout
# moves on.
#
# - spec.revisionHistoryLimit (Kubernetes default 10) within
#   [minRevisionHistoryLimit, maxRevisionHistoryLimit] of the namespace class;
# - spec.minReadySeconds (Kubernetes default 0) at least the class's minReadySeconds.
package daemonguard.policies.revision_history

import data.daemonguard.lib

enforcement := "deny"

policy := "revision_history"

limit_field := "spec.revisionHistoryLimit"

ready_field := "spec.minReadySeconds"

revision_history_limit := v if {
	v := lib.spec.revisionHistoryLimit
	v != null
} else := 10

min_ready_seconds := v if {
	v := lib.spec.minReadySeconds
	v != null
} else := 0

default_note(key) := " (the default)" if {
	not lib.has_value(lib.spec, key)
} else := ""

min_limit := lib.param_number(policy, "minRevisionHistoryLimit")

max_limit := lib.param_number(policy, "maxRevisionHistoryLimit")

min_ready := lib.param_number(policy, "minReadySeconds")

# range_text describes the allowed range of revisionHistoryLimit, whichever bounds are set.
range_text := t if {
	t := sprintf("an integer from %v to %v", [min_limit, max_limit])
} else := t if {
	t := sprintf("an integer of at least %v", [min_limit])
} else := t if {
	t := sprintf("an integer of at most %v", [max_limit])
} else := "any non-negative integer"

violation contains {"field": limit_field, "msg": msg} if {
	not non_negative_integer(revision_history_limit)
	msg := sprintf("revisionHistoryLimit %s is not a non-negative integer (allowed: %s)", [lib.quote(revision_history_limit), range_text])
}

violation contains {"field": limit_field, "msg": msg} if {
	non_negative_integer(revision_history_limit)
	revision_history_limit < min_limit
	msg := sprintf(
		"revisionHistoryLimit %v%s is below the allowed minimum of %v for namespace class %q (allowed: %s): `kubectl rollout undo` needs old revisions to go back to",
		[revision_history_limit, default_note("revisionHistoryLimit"), min_limit, lib.namespace_class, range_text],
	)
}

violation contains {"field": limit_field, "msg": msg} if {
	non_negative_integer(revision_history_limit)
	revision_history_limit > max_limit
	msg := sprintf(
		"revisionHistoryLimit %v%s exceeds the allowed maximum of %v for namespace class %q (allowed: %s): every kept revision is a ControllerRevision object stored in etcd",
		[revision_history_limit, default_note("revisionHistoryLimit"), max_limit, lib.namespace_class, range_text],
	)
}

violation contains {"field": ready_field, "msg": msg} if {
	not non_negative_integer(min_ready_seconds)
	msg := sprintf("minReadySeconds %s is not a non-negative integer (allowed: an integer of at least %v)", [lib.quote(min_ready_seconds), min_ready_or_zero])
}

violation contains {"field": ready_field, "msg": msg} if {
	non_negative_integer(min_ready_seconds)
	min_ready_seconds < min_ready
	msg := sprintf(
		"minReadySeconds %v%s is below the allowed minimum of %v for namespace class %q (allowed: %v or more): a new pod must stay ready that long before the rollout moves on to the next nodes",
		[min_ready_seconds, default_note("minReadySeconds"), min_ready, lib.namespace_class, min_ready],
	)
}

min_ready_or_zero := n if {
	n := min_ready
} else := 0

non_negative_integer(v) if {
	lib.is_integer(v)
	v >= 0
}
