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
		"daemonguard.io/bake": "30m",
		"daemonguard.io/topology-key": "topology.kubernetes.io/zone",
		"daemonguard.io/on-delete-exempt": "replaced during node maintenance",
		"daemonguard.io/inject": "true",
		"daemonguard.io/analysis": "- {name: errors, query: 'errors{node=~\"{{ nodes }}\"}', max: 0}",
		"daemonguard.io/on-analysis-failure": "rollback",
	})
}

# --- unknown keys and non-string values ---------------------------------------------------------

test_denies_unknown_daemonguard_annotation if {
	vs := violation with input as review({"daemonguard.io/stpes": "1,100%"})
	vs == {{
		"field": `metadata.annotations["daemonguard.io/stpes"]`,
		"msg": `unknown daemonguard annotation "daemonguard.io/stpes" (a typo?); known annotations: daemonguard.io/analysis, daemonguard.io/bake, daemonguard.io/inject, daemonguard.io/max-unavailable, daemonguard.io/on-analysis-failure, daemonguard.io/on-delete-exempt, daemonguard.io/paused, daemonguard.io/progress-deadline, daemonguard.io/resume, daemonguard.io/rollout, daemonguard.io/steps, daemonguard.io/topology-key`,
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

# --- daemonguard.io/bake -------------------------------------------------------------------------

test_bake_valid if {
	every value in ["1ns", "30s", "0.5m", "10m", "1h30m", "24h", "23h59m60s", "24h0.4ns"] {
		valid_value("daemonguard.io/bake", value)
	}
}

test_bake_invalid if {
	every value in ["0s", "0", "0.5ns", "10", "10 m", "1d", "-10m", "+10m", "", "24h1ns", "25h", "8760h", "99999999999999999999h"] {
		invalid_value("daemonguard.io/bake", value)
	}
	some v in violations_of("daemonguard.io/bake", "2d")
	v.msg == `value "2d" is not allowed: it must be a Go duration above 0s and at most 24h (e.g. "10m", "1h")`
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

test_steps_first_invalid_steps_reported_then_counted if {
	vs := steps_violations("0,0%,101%,pause:,pause:0s,pause:5,pause:9000h,Pause,,1000000000,100%")
	[v.msg | some v in vs; startswith(v.msg, "step ")] == [
		`step 1 "0" of "0,0%,101%,pause:,pause:0s,pause:5,pause:9000h,Pause,,1000000000,100%" is not valid: each step must be a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" or "pause:<duration>" with a Go duration up to 8760h (e.g. "pause:5m")`,
		`step 2 "0%" of "0,0%,101%,pause:,pause:0s,pause:5,pause:9000h,Pause,,1000000000,100%" is not valid: each step must be a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" or "pause:<duration>" with a Go duration up to 8760h (e.g. "pause:5m")`,
		`step 3 "101%" of "0,0%,101%,pause:,pause:0s,pause:5,pause:9000h,Pause,,1000000000,100%" is not valid: each step must be a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" or "pause:<duration>" with a Go duration up to 8760h (e.g. "pause:5m")`,
	]
	{v.msg | some v in vs; not startswith(v.msg, "step ")} == {"and 7 more steps are not valid (only the first 3 are reported)"}
}

# A hostile value: 20,000 empty steps get four violations of bounded length, not 20,000 that each
# quote the whole value.
test_steps_thousands_of_empty_steps if {
	value := concat("", ["1", repeat(",", 20000)])
	vs := steps_violations(value)
	count(vs) == 4
	every v in vs {
		v.field == steps_field
		count(v.msg) < 500
	}
	some v in vs
	v.msg == sprintf(`step 2 "" of "1%s"… (19881 more characters) is not valid: %s`, [repeat(",", 119), step_hint])
	some summary in vs
	summary.msg == "and 19997 more steps are not valid (only the first 3 are reported)"
}

test_steps_one_huge_step if {
	vs := steps_violations(concat("", [repeat("x", 60000), ",100%"]))
	count(vs) == 1
	every v in vs {
		contains(v.msg, "… (59880 more characters)")
		count(v.msg) < 600
	}
}

test_steps_thousands_of_decreasing_steps if {
	value := concat(",", [sprintf("%d%%", [100 - i]) | some i in numbers.range(0, 99)])
	msgs := {v.msg | some v in steps_violations(value)}
	count(msgs) == 5
	`step 2 "99%" of "100%,99%,98%,97%,96%,95%,94%,93%,92%,91%,90%,89%,88%,87%,86%,85%,84%,83%,82%,81%,80%,79%,78%,77%,76%,75%,74%,73%,72%,71%"… (271 more characters) is smaller than step 1 "100%": percent steps must not decrease` in msgs
	"and 96 more steps are smaller than the step of their kind before them (only the first 3 are reported)" in msgs
	some m in msgs
	contains(m, `does not end with "100%": the rollout would never finish; make "100%" the last step that is not a pause (e.g. the value followed by ",100%")`)
}

test_steps_long_value_not_ending_at_100 if {
	vs := steps_violations(concat("", [repeat("1,", 5000), "1"]))
	count(vs) == 1
	every v in vs {
		endswith(v.msg, `(e.g. the value followed by ",100%")`)
		count(v.msg) < 500
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

# --- daemonguard.io/on-analysis-failure ---------------------------------------------------------

test_on_analysis_failure if {
	valid_value("daemonguard.io/on-analysis-failure", "halt")
	valid_value("daemonguard.io/on-analysis-failure", "rollback")
	vs := violations_of("daemonguard.io/on-analysis-failure", "Rollback")
	vs == {{
		"field": `metadata.annotations["daemonguard.io/on-analysis-failure"]`,
		"msg": `value "Rollback" is not allowed: it must be "halt" or "rollback"`,
	}}
	invalid_value("daemonguard.io/on-analysis-failure", "")
}

# --- daemonguard.io/analysis --------------------------------------------------------------------

analysis_field := `metadata.annotations["daemonguard.io/analysis"]`

# analysis_msgs(value) are the messages of the violations of daemonguard.io/analysis: value.
analysis_msgs(value) := {v.msg |
	some v in violations_of("daemonguard.io/analysis", value)
	v.field == analysis_field
}

# one_gate(fields) is a list of one gate: a valid gate's fields, some replaced by fields.
one_gate(fields) := json.marshal([object.union(
	{"name": "errors", "query": `sum by (node) (rate(errors_total{node=~"{{ nodes }}"}[5m]))`, "max": 0.1},
	fields,
)])

test_analysis_valid if {
	every value in [
		`- name: errors
  query: 'sum by (node) (rate(errors_total{node=~"{{ nodes }}"}[5m]))'
  max: 0.1
- name: latency-p99
  query: 'histogram_quantile(0.99, sum by (le, instance) (rate(x_bucket{instance=~"{{nodes}}", rev="{{ revision }}", old="{{ old_revision }}", ds="{{ namespace }}/{{ name }}"}[5m])))'
  min: -1
  max: 2
  interval: 1m30s
  count: 100
  nodeLabel: instance
  baseline: true`,
		one_gate({"min": 0, "max": 0}),
		one_gate({"min": 5, "max": null}),
		one_gate({"interval": "1s", "count": 1, "baseline": false, "nodeLabel": "_n0"}),
		one_gate({"interval": "1h", "name": "a"}),
		one_gate({"interval": "0.5s500ms", "name": "0-9"}),
		one_gate({"interval": "0.00000000001h1s"}),
		"- {name: a, query: '{{ nodes }}', max: 1, count: 3.0, interval: 0.0166666667m}",
		one_gate({"interval": null, "count": null, "nodeLabel": null, "baseline": null}),
		one_gate({"name": concat("", [repeat("a", 62), "z"])}),
	] {
		analysis_msgs(value) == set()
	}
}

test_analysis_not_yaml if {
	analysis_msgs("[unclosed") == {`value "[unclosed" is not valid YAML: it must be a YAML list of analysis gates, each an object with a name, a query, max, min or both, and optionally interval, count, nodeLabel and baseline`}
	count(analysis_msgs("- max: .inf")) == 1
	count(analysis_msgs("- name: a\n\tquery: x")) == 1
}

test_analysis_no_gate if {
	analysis_msgs("") == {`value "" lists no gate: list at least one, or remove the annotation`}
	count(analysis_msgs("[]")) == 1
	count(analysis_msgs("# none")) == 1
}

test_analysis_not_a_list if {
	analysis_msgs("name: errors") == {`value "name: errors" is not a YAML list: it must be a YAML list of analysis gates, each an object with a name, a query, max, min or both, and optionally interval, count, nodeLabel and baseline`}
}

test_analysis_gate_not_an_object if {
	analysis_msgs(`["errors"]`) == {`gate 1 "errors" is not an object: each gate must be an object with the fields baseline, count, interval, max, min, name, nodeLabel, query`}
	count(analysis_msgs(`[null]`)) == 1
}

test_analysis_unknown_field if {
	analysis_msgs(one_gate({"Name": "x", "treshold": 1})) == {
		`gate 1 ("errors"): unknown field "Name" (a typo?); known fields: baseline, count, interval, max, min, name, nodeLabel, query`,
		`gate 1 ("errors"): unknown field "treshold" (a typo?); known fields: baseline, count, interval, max, min, name, nodeLabel, query`,
	}
}

test_analysis_missing_fields if {
	analysis_msgs(`[{max: 1}]`) == {
		`gate 1: name is missing: it must be a DNS label: at most 63 lower-case letters, digits and "-", starting and ending with a letter or digit (e.g. "errors")`,
		`gate 1: query is missing: it must be a non-empty PromQL string`,
	}
	count(analysis_msgs(one_gate({"name": null}))) == 1
}

test_analysis_name if {
	analysis_msgs(one_gate({"name": "Errors"})) == {`gate 1 ("Errors"): name "Errors" is not allowed: it must be a DNS label: at most 63 lower-case letters, digits and "-", starting and ending with a letter or digit (e.g. "errors")`}
	every name in ["", "-a", "a-", "a_b", "a.b", 123, true, repeat("a", 64)] {
		count(analysis_msgs(one_gate({"name": name}))) == 1
	}
	analysis_msgs(one_gate({"name": 123})) == {`gate 1: name 123 is not allowed: it must be a DNS label: at most 63 lower-case letters, digits and "-", starting and ending with a letter or digit (e.g. "errors")`}
}

test_analysis_names_unique if {
	gate := {"query": `x{node=~"{{ nodes }}"}`, "max": 1}
	value := json.marshal([
		object.union(gate, {"name": "a"}),
		object.union(gate, {"name": "b"}),
		object.union(gate, {"name": "a"}),
		object.union(gate, {"name": "a"}),
	])
	analysis_msgs(value) == {
		`gate 3 ("a"): name "a" is used by gate 1 too: names must be unique`,
		`gate 4 ("a"): name "a" is used by gate 1 too: names must be unique`,
	}
}

test_analysis_query if {
	analysis_msgs(one_gate({"query": " "})) == {`gate 1 ("errors"): query " " is not allowed: it must be a non-empty PromQL string`}
	count(analysis_msgs(one_gate({"query": 5}))) == 1
}

test_analysis_query_placeholders if {
	analysis_msgs(one_gate({"query": `x{node=~"{{ nodes }}", pod="{{ pod }}", a="{{}}"}`})) == {
		`gate 1 ("errors"): query placeholder "{{ pod }}" is not allowed: it must be one of {{ nodes }}, {{ revision }}, {{ old_revision }}, {{ name }}, {{ namespace }}`,
		`gate 1 ("errors"): query placeholder "{{}}" is not allowed: it must be one of {{ nodes }}, {{ revision }}, {{ old_revision }}, {{ name }}, {{ namespace }}`,
	}
	count(analysis_msgs(one_gate({"query": `x{node=~"{{ Nodes }}"}`}))) == 2

	# Not placeholders: the controller leaves them as written.
	analysis_msgs(one_gate({"query": `x{node=~"{{ nodes }}", a="{{ a-b }}", b="{ name }"}`})) == set()
}

test_analysis_query_must_use_nodes if {
	analysis_msgs(one_gate({"query": `up{job="{{ name }}"}`})) == {`gate 1 ("errors"): query "up{job=\"{{ name }}\"}" does not use {{ nodes }}: it must select the wave's nodes with it, e.g. node=~"{{ nodes }}"`}
}

test_analysis_bounds if {
	analysis_msgs(one_gate({"max": null})) == {`gate 1 ("errors"): neither max nor min is set: set one or both to bound each node's value`}
	analysis_msgs(one_gate({"min": 2, "max": 1})) == {`gate 1 ("errors"): min 2 is above max 1: min must be at most max`}
	analysis_msgs(one_gate({"max": "1"})) == {`gate 1 ("errors"): max "1" is not allowed: it must be a number`}
	analysis_msgs(one_gate({"min": true})) == {`gate 1 ("errors"): min true is not allowed: it must be a number`}
	count(analysis_msgs("- {name: a, query: '{{ nodes }}', max: 1e400}")) == 1
}

test_analysis_interval if {
	analysis_msgs(json.marshal([{"name": "errors", "query": "{{ nodes }}", "max": 1, "interval": "0s"}])) == {`gate 1 ("errors"): interval "0s" is not allowed: it must be a Go duration from 1s to 1h`}
	every interval in ["999ms", "1h0.001s", "61m", "30", 30, "", "1d", "-1m", "+1m", ".5s", "1.0000000001s", "1.00000000001m", "1.000000000001h", "1000000000.1ns"] {
		count(analysis_msgs(one_gate({"interval": interval}))) == 1
	}
}

test_analysis_count if {
	analysis_msgs(one_gate({"count": 0})) == {`gate 1 ("errors"): count 0 is not allowed: it must be an integer from 1 to 100`}
	every n in [101, 1.5, -1, "3"] {
		count(analysis_msgs(one_gate({"count": n}))) == 1
	}
}

test_analysis_node_label if {
	analysis_msgs(one_gate({"nodeLabel": "node-name"})) == {`gate 1 ("errors"): nodeLabel "node-name" is not allowed: it must be a Prometheus label name: letters, digits and "_", not starting with a digit (e.g. "instance")`}
	every label in ["", "1node", "a.b", true, 5] {
		count(analysis_msgs(one_gate({"nodeLabel": label}))) == 1
	}
}

test_analysis_baseline if {
	analysis_msgs(one_gate({"baseline": "yes"})) == {`gate 1 ("errors"): baseline "yes" is not allowed: it must be true or false`}
	count(analysis_msgs("- {name: a, query: '{{ nodes }}', max: 1, baseline: yes}")) == 1
}

test_analysis_every_gate_reported if {
	value := json.marshal([
		{"name": "a", "query": "{{ nodes }}", "max": 1, "count": 0},
		"x",
		{"name": "c", "query": "{{ nodes }}", "min": 1, "interval": "0s"},
	])
	analysis_msgs(value) == {
		`gate 1 ("a"): count 0 is not allowed: it must be an integer from 1 to 100`,
		`gate 2 "x" is not an object: each gate must be an object with the fields baseline, count, interval, max, min, name, nodeLabel, query`,
		`gate 3 ("c"): interval "0s" is not allowed: it must be a Go duration from 1s to 1h`,
	}
}

test_analysis_non_string_value if {
	violations_of("daemonguard.io/analysis", ["x"]) == {{
		"field": analysis_field,
		"msg": `value ["x"] is not a string: annotation values are strings, quote it in YAML`,
	}}
}

# --- hostile inputs: every per-element rule reports a few elements, then counts the rest --------

valid_gate := {"name": "errors", "query": `x{node=~"{{ nodes }}"}`, "max": 1}

test_analysis_at_most_10_gates if {
	ten := json.marshal([object.union(valid_gate, {"name": sprintf("g%d", [i])}) | some i in numbers.range(1, 10)])
	analysis_msgs(ten) == set()
	eleven := json.marshal([object.union(valid_gate, {"name": sprintf("g%d", [i])}) | some i in numbers.range(1, 11)])
	analysis_msgs(eleven) == {"value lists 11 gates: at most 10 gates are allowed per DaemonSet (each is a Prometheus query at every interval)"}
}

# 1,000 gates with one name: one violation for the count, three duplicates and one that counts
# the rest, found without comparing every pair.
test_analysis_thousands_of_gates_with_one_name if {
	msgs := analysis_msgs(json.marshal([valid_gate | some _ in numbers.range(1, 1000)]))
	msgs == {
		"value lists 1000 gates: at most 10 gates are allowed per DaemonSet (each is a Prometheus query at every interval)",
		`gate 2 ("errors"): name "errors" is used by gate 1 too: names must be unique`,
		`gate 3 ("errors"): name "errors" is used by gate 1 too: names must be unique`,
		`gate 4 ("errors"): name "errors" is used by gate 1 too: names must be unique`,
		"and 996 more gates repeat an earlier gate's name (only the first 3 are reported)",
	}
}

test_analysis_thousands_of_bad_entries if {
	msgs := analysis_msgs(json.marshal(array.concat([valid_gate], [1 | some _ in numbers.range(1, 2000)])))
	count(msgs) == 5
	"and 1997 more entries are not gates (objects) (only the first 3 are reported)" in msgs
}

test_analysis_thousands_of_fields if {
	gate := object.union(valid_gate, {sprintf("f%05d", [i]): i | some i in numbers.range(1, 2000)})
	msgs := analysis_msgs(json.marshal([gate]))
	msgs == {
		`gate 1 ("errors"): unknown field "f00001" (a typo?); known fields: baseline, count, interval, max, min, name, nodeLabel, query`,
		`gate 1 ("errors"): unknown field "f00002" (a typo?); known fields: baseline, count, interval, max, min, name, nodeLabel, query`,
		`gate 1 ("errors"): unknown field "f00003" (a typo?); known fields: baseline, count, interval, max, min, name, nodeLabel, query`,
		"and 1997 more unknown fields of gates (only the first 3 are reported)",
	}
}

test_analysis_thousands_of_placeholders if {
	query := concat("", [`x{node=~"{{ nodes }}"} `, repeat("{{ evil }}", 5000)])
	analysis_msgs(json.marshal([object.union(valid_gate, {"query": query})])) == {
		`gate 1 ("errors"): query placeholder "{{ evil }}" is not allowed: it must be one of {{ nodes }}, {{ revision }}, {{ old_revision }}, {{ name }}, {{ namespace }}`,
	}
	five := `x{node=~"{{ nodes }}"} {{ a }}{{ b }}{{ c }}{{ d }}{{ e }}{{ a }}`
	msgs := analysis_msgs(json.marshal([object.union(valid_gate, {"query": five})]))
	count(msgs) == 4
	"and 2 more query placeholders are not allowed (only the first 3 are reported)" in msgs
}

test_analysis_huge_values_are_cut if {
	huge := repeat("a", 60000)
	msgs := analysis_msgs(json.marshal([object.union(valid_gate, {"name": huge, "query": huge})]))
	count(msgs) == 2
	every m in msgs {
		count(m) < 700
		contains(m, "… (59880 more characters)")
	}
}

test_thousands_of_unknown_annotations if {
	vs := violation with input as review({sprintf("daemonguard.io/typo-%05d", [i]): "x" | some i in numbers.range(1, 3000)})
	count(vs) == 4
	{v.field | some v in vs} == {
		`metadata.annotations["daemonguard.io/typo-00001"]`,
		`metadata.annotations["daemonguard.io/typo-00002"]`,
		`metadata.annotations["daemonguard.io/typo-00003"]`,
		"metadata.annotations",
	}
	some v in vs
	v.msg == "and 2997 more daemonguard.io/ annotations are unknown (only the first 3 are reported)"
}
