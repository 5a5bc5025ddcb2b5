package daemonguard.policies.rollout_annotations

review(annotations) := {
	"operation": "CHECK",
	"object": {
		"apiVersion": "apps/v1",
		"kind": "DaemonSet",
		"metadata": {"name": "agent", "annotations": annotations},
		"spec": {"updateStrategy": {"type": "OnDelete"}},
	},
	"namespace": {"name": "apps", "labels": {}},
}

# violations_of(key, value) are the violations of a DaemonSet annotated with key: value only.
violations_of(key, value) := vs if {
	vs := violation with input as review({key: value})
}

# valid_value(key, value) holds when key: value raises no violation.
valid_value(key, value) if count(violations_of(key, value)) == 0

# invalid_value(key, value) holds when key: value raises exactly one violation, on that key.
invalid_value(key, value) if {
	vs := violations_of(key, value)
	count(vs) == 1
	some v in vs
	v.field == sprintf("metadata.annotations[%q]", [key])
}

repeat(s, n) := concat("", [s | some _ in numbers.range(1, n)])

# --- allowed ------------------------------------------------------------------------------------

test_allows_no_annotations if {
	count(violation) == 0 with input as review({})
	count(violation) == 0 with input as review(null)
	count(violation) == 0 with input as review("garbage")
	count(violation) == 0 with input as {}
}

test_ignores_other_and_status_annotations if {
	count(violation) == 0 with input as review({
		"kubectl.kubernetes.io/last-applied-configuration": "{}",
		"deprecated.daemonset.template.generation": "3",
		"status.daemonguard.io/phase": "Paused",
		"status.daemonguard.io/anything": true,
		"rollout.daemonguard.io/x": "y",
	})
}

test_allows_every_known_annotation if {
	count(violation) == 0 with input as review({
		"daemonguard.io/rollout": "managed",
		"daemonguard.io/max-unavailable": "25%",
		"daemonguard.io/steps": "1,pause,10%,pause:5m,50%,100%",
		"daemonguard.io/paused": "false",
		"daemonguard.io/resume": "2024-05-01T10:00:00Z",
		"daemonguard.io/progress-deadline": "10m",
		"daemonguard.io/topology-key": "topology.kubernetes.io/zone",
		"daemonguard.io/on-delete-exempt": "replaced during node maintenance",
		"daemonguard.io/inject": "true",
	})
}

# --- unknown keys and non-string values ---------------------------------------------------------

test_denies_unknown_daemonguard_annotation if {
	vs := violation with input as review({"daemonguard.io/stpes": "1,100%"})
	vs == {{
		"field": `metadata.annotations["daemonguard.io/stpes"]`,
		"msg": `unknown daemonguard annotation "daemonguard.io/stpes" (a typo?); known annotations: daemonguard.io/inject, daemonguard.io/max-unavailable, daemonguard.io/on-delete-exempt, daemonguard.io/paused, daemonguard.io/progress-deadline, daemonguard.io/resume, daemonguard.io/rollout, daemonguard.io/steps, daemonguard.io/topology-key`,
	}}
}

test_denies_non_string_values if {
	vs := violation with input as review({"daemonguard.io/paused": true})
	vs == {{
		"field": `metadata.annotations["daemonguard.io/paused"]`,
		"msg": "value true is not a string: annotation values are strings, quote it in YAML",
	}}
	invalid_value("daemonguard.io/max-unavailable", 2)
	invalid_value("daemonguard.io/steps", null)
}

test_unknown_non_string_gets_both_messages if {
	count(violations_of("daemonguard.io/foo", 5)) == 2
}

# --- daemonguard.io/rollout ---------------------------------------------------------------------

test_rollout if {
	valid_value("daemonguard.io/rollout", "managed")
	vs := violations_of("daemonguard.io/rollout", "Managed")
	vs == {{
		"field": `metadata.annotations["daemonguard.io/rollout"]`,
		"msg": `value "Managed" is not allowed: it must be "managed"`,
	}}
	invalid_value("daemonguard.io/rollout", "")
}

# --- daemonguard.io/max-unavailable -------------------------------------------------------------

test_max_unavailable_valid if {
	every value in ["1", "3", "100", "1%", "25%", "100%"] {
		valid_value("daemonguard.io/max-unavailable", value)
	}
}

test_max_unavailable_invalid if {
	every value in ["0", "0%", "101%", "abc", "-1", "1.5", "", " ", "5 %", "1000000000"] {
		invalid_value("daemonguard.io/max-unavailable", value)
	}
	some v in violations_of("daemonguard.io/max-unavailable", "0")
	v.msg == `value "0" is not allowed: it must be an integer node count from 1 (e.g. "2") or a percentage "N%" with N from 1 to 100 (e.g. "25%")`
}

# --- daemonguard.io/paused, daemonguard.io/inject -----------------------------------------------

test_booleans if {
	every key in ["daemonguard.io/paused", "daemonguard.io/inject"] {
		valid_value(key, "true")
		valid_value(key, "false")
		invalid_value(key, "True")
		invalid_value(key, "yes")
		invalid_value(key, "")
	}
	some v in violations_of("daemonguard.io/paused", "yes")
	v.msg == `value "yes" is not allowed: it must be "true" or "false"`
}

# --- daemonguard.io/resume ----------------------------------------------------------------------

test_resume if {
	valid_value("daemonguard.io/resume", "1")
	valid_value("daemonguard.io/resume", repeat("a", 63))
	invalid_value("daemonguard.io/resume", repeat("a", 64))
	invalid_value("daemonguard.io/resume", "")
}

# --- daemonguard.io/progress-deadline -----------------------------------------------------------

test_progress_deadline_valid if {
	every value in ["30s", "0.5m", "10m", "1h30m", "8760h"] {
		valid_value("daemonguard.io/progress-deadline", value)
	}
}

test_progress_deadline_invalid if {
	every value in ["29s", "29999ms", "10", "10 m", "1d", "-10m", "", "8761h", "99999999999999999999h"] {
		invalid_value("daemonguard.io/progress-deadline", value)
	}
	some v in violations_of("daemonguard.io/progress-deadline", "10s")
	v.msg == `value "10s" is not allowed: it must be a Go duration from 30s to 8760h (e.g. "10m", "1h30m")`
}

test_progress_deadline_parameter if {
	vs := violations_of("daemonguard.io/progress-deadline", "45s") with data.daemonguard.parameters.policies.rollout_annotations.default.minProgressDeadlineSeconds as 60
	count(vs) == 1
	some v in vs
	contains(v.msg, "a Go duration from 60s to 8760h")
	valid_value("daemonguard.io/progress-deadline", "45s")
}

# --- daemonguard.io/topology-key, daemonguard.io/on-delete-exempt -------------------------------

test_topology_key if {
	valid_value("daemonguard.io/topology-key", "topology.kubernetes.io/zone")
	valid_value("daemonguard.io/topology-key", "kubernetes.io/hostname")
	valid_value("daemonguard.io/topology-key", "rack")
	invalid_value("daemonguard.io/topology-key", "Topology.io/zone")
	invalid_value("daemonguard.io/topology-key", "a/b/c")
	invalid_value("daemonguard.io/topology-key", "")
}

test_on_delete_exempt if {
	valid_value("daemonguard.io/on-delete-exempt", "manual")
	invalid_value("daemonguard.io/on-delete-exempt", "")
	invalid_value("daemonguard.io/on-delete-exempt", "  ")
}

# --- daemonguard.io/steps -----------------------------------------------------------------------

steps_field := `metadata.annotations["daemonguard.io/steps"]`

steps_violations(value) := violations_of("daemonguard.io/steps", value)

test_steps_valid if {
	every value in [
		"100%",
		"1,100%",
		"1,2,5,100%",
		"1,pause,25%,pause:30m,100%",
		"10,5%,20,100%",
		" 1 , 50% ,100% ",
		"50%,50%,100%",
		"1,100%,pause",
		"pause:1h30m,100%",
		"pause:8760h,100%",
	] {
		count(steps_violations(value)) == 0
	}
}

test_steps_empty if {
	vs := steps_violations("")
	vs == {{"field": steps_field, "msg": `value "" is an empty list: list at least one step, ending with "100%" (e.g. "1,25%,100%")`}}
	count(steps_violations("  ")) == 1
}

test_steps_invalid_step if {
	vs := steps_violations("1,abc,100%")
	vs == {{
		"field": steps_field,
		"msg": `step 2 "abc" of "1,abc,100%" is not valid: each step must be a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" or "pause:<duration>" with a Go duration up to 8760h (e.g. "pause:5m")`,
	}}
}

test_steps_every_invalid_step_reported if {
	vs := steps_violations("0,0%,101%,pause:,pause:0s,pause:5,pause:9000h,Pause,,1000000000,100%")
	count(vs) == 10
	every v in vs {
		contains(v.msg, "is not valid")
	}
}

# The rollout controller truncates each component of a duration to whole nanoseconds.
test_steps_pause_shorter_than_a_nanosecond if {
	count(steps_violations("pause:0.5ns,100%")) == 1
	count(steps_violations("pause:0.0009µs,100%")) == 1
	count(steps_violations("pause:1ns,pause:0.001µs,pause:30s0.5ns,100%")) == 0
}

test_steps_trailing_comma if {
	vs := steps_violations("1,100%,")
	count(vs) == 1
	some v in vs
	startswith(v.msg, `step 3 "" of "1,100%,"`)
}

test_steps_percent_must_not_decrease if {
	vs := steps_violations("10%,50%,20%,100%")
	vs == {{"field": steps_field, "msg": `step 3 "20%" of "10%,50%,20%,100%" is smaller than step 2 "50%": percent steps must not decrease`}}
}

test_steps_counts_must_not_decrease if {
	vs := steps_violations("5,10%,2,100%")
	vs == {{"field": steps_field, "msg": `step 3 "2" of "5,10%,2,100%" is smaller than step 1 "5": count steps must not decrease`}}
}

test_steps_must_end_with_100_percent if {
	vs := steps_violations("1,50%")
	vs == {{
		"field": steps_field,
		"msg": `value "1,50%" does not end with "100%": the rollout would never finish; make "100%" the last step that is not a pause (e.g. "1,50%,100%")`,
	}}
	count(steps_violations("1,50%,pause")) == 1
	count(steps_violations("pause")) == 1
	count(steps_violations("100%,1")) == 1
	count(steps_violations("100")) == 1
}

test_steps_decrease_and_end_reported_together if {
	vs := steps_violations("50%,10%")
	count(vs) == 2
}

test_enforcement if {
	enforcement == "deny"
}
