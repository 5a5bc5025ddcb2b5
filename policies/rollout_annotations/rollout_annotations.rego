# rollout_annotations: the daemonguard.io/ annotations that drive daemonguard's rollout controller
# and mutating webhook must be well-formed, and must be known (a typo would be silently ignored).
# Annotations under status.daemonguard.io/ are written by the controller and are not checked.
package daemonguard.policies.rollout_annotations

import data.daemonguard.lib

enforcement := "deny"

prefix := "daemonguard.io/"

# known maps each annotation to a description of its allowed values, used in messages.
known := {
	"daemonguard.io/rollout": `"managed"`,
	"daemonguard.io/max-unavailable": `an integer node count from 1 (e.g. "2") or a percentage "N%" with N from 1 to 100 (e.g. "25%")`,
	"daemonguard.io/steps": `a comma-separated list of steps, each a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" (until resumed) or "pause:<duration>" (e.g. "pause:5m"), ending with "100%" (e.g. "1,pause:10m,25%,100%")`,
	"daemonguard.io/paused": `"true" or "false"`,
	"daemonguard.io/resume": `any non-empty token of at most 63 characters`,
	"daemonguard.io/progress-deadline": sprintf(`a Go duration from %vs to 8760h (e.g. "10m", "1h30m")`, [min_progress_deadline]),
	"daemonguard.io/topology-key": `a label key such as "topology.kubernetes.io/zone"`,
	"daemonguard.io/bake": sprintf(`a Go duration above 0s and at most %s (e.g. "10m", "1h")`, [max_bake]),
	"daemonguard.io/on-delete-exempt": `a non-empty reason`,
	"daemonguard.io/inject": `"true" or "false"`,
	"daemonguard.io/analysis": `a YAML list of analysis gates, each an object with a name, a query, max, min or both, and optionally interval, count, nodeLabel and baseline`,
	"daemonguard.io/on-analysis-failure": `"halt" or "rollback"`,
}

field(key) := sprintf("metadata.annotations[%q]", [key])

# not_allowed(key, value) is the common message for a value outside what known[key] describes.
not_allowed(key, value) := sprintf("value %s is not allowed: it must be %s", [lib.quote(value), known[key]])

# The violations come in three groups, each evaluated only when the annotations it checks are
# there: OPA evaluates every rule body of a set it is asked for, and a DaemonSet without
# daemonguard.io/ annotations (most of them) then costs three tests instead of some thirty rule
# bodies (docs/performance.md). Within a group, a rule that reports findings of a gate list first
# tests that there is a list, for the same reason.
violation contains v if {
	count(ours) > 0
	some v in key_violation
}

violation contains v if {
	is_string(steps_value)
	some v in steps_violation
}

violation contains v if {
	is_string(analysis_value)
	some v in analysis_violation
}

ours contains key if {
	some key, _ in lib.annotations
	startswith(key, prefix)
}

# The rules that check each key of ours report the first lib.max_reported keys they find at fault
# (sorted), and one violation on metadata.annotations counts the rest (key_findings).

# Values that are not strings (e.g. an unquoted true or 5 in YAML).
non_string_keys := sort([key | some key in ours; not is_string(lib.annotations[key])])

key_violation contains {"field": field(key), "msg": msg} if {
	some key in lib.reported(non_string_keys)
	msg := sprintf("value %s is not a string: annotation values are strings, quote it in YAML", [lib.quote(lib.annotations[key])])
}

# Unknown keys.
unknown_keys := sort([key | some key in ours; not known[key]])

key_violation contains {"field": field(key), "msg": msg} if {
	some key in lib.reported(unknown_keys)
	msg := sprintf("unknown daemonguard annotation %s (a typo?); known annotations: %s", [lib.quote(key), concat(", ", sort(object.keys(known)))])
}

key_findings := {
	"daemonguard.io/ annotations are not strings": non_string_keys,
	"daemonguard.io/ annotations are unknown": unknown_keys,
}

key_violation contains {"field": "metadata.annotations", "msg": msg} if {
	count(ours) > lib.max_reported
	some what, findings in key_findings
	msg := lib.more_msg(findings, what)
}

# Checks of the value of each known key; only string values reach them.
value_of(key) := v if {
	v := lib.annotations[key]
	is_string(v)
}

key_violation contains {"field": field(key), "msg": not_allowed(key, value)} if {
	some key in ours
	value := value_of(key)
	not valid(key, value)
}

valid("daemonguard.io/rollout", value) if value == "managed"

valid("daemonguard.io/max-unavailable", value) if node_count_or_percent(value)

valid("daemonguard.io/paused", value) if value in {"true", "false"}

valid("daemonguard.io/inject", value) if value in {"true", "false"}

valid("daemonguard.io/resume", value) if {
	value != ""
	count(value) <= 63
}

valid("daemonguard.io/progress-deadline", value) if {
	ns := lib.duration_ns(value)
	ns >= min_progress_deadline * 1000000000
	ns <= lib.max_duration_ns
}

valid("daemonguard.io/topology-key", value) if lib.is_qualified_name(value)

valid("daemonguard.io/bake", value) if {
	go_positive(value)
	lib.duration_ns(value) <= lib.duration_ns(max_bake)
}

valid("daemonguard.io/on-delete-exempt", value) if trim_space(value) != ""

valid("daemonguard.io/on-analysis-failure", value) if value in {"halt", "rollback"}

# steps and analysis gates are checked below, part by part.
valid("daemonguard.io/steps", _) := true

valid("daemonguard.io/analysis", _) := true

min_progress_deadline := n if {
	n := lib.param_number("rollout_annotations", "minProgressDeadlineSeconds")
} else := 30

# max_bake bounds daemonguard.io/bake: a bake is a soak of minutes or hours, a longer hold is a
# pause. The Go twin is rolloutapi.MaxBake (internal/rolloutapi/annotations.go);
# TestMaxBakeMatchesRolloutAPI in internal/rolloutapi holds the two equal.
max_bake := "24h"

# node_count_or_percent(s) holds for "1".."999999999" and "1%".."100%".
node_count_or_percent(s) if parse_step(s).type in {"count", "percent"}

# --- daemonguard.io/steps -----------------------------------------------------------------------

steps_key := "daemonguard.io/steps"

steps_value := value_of(steps_key)

# parse_step(s) is {"type": "count"|"percent", "value": n} or {"type": "pause"}; undefined when s
# is not a valid step.
parse_step(s) := {"type": "count", "value": lib.digits_to_number(s)} if {
	regex.match(`^[0-9]{1,9}$`, s)
	lib.digits_to_number(s) >= 1
}

parse_step(s) := {"type": "percent", "value": n} if {
	regex.match(`^[0-9]{1,3}%$`, s)
	n := lib.digits_to_number(trim_suffix(s, "%"))
	n >= 1
	n <= 100
}

parse_step(s) := {"type": "pause"} if s == "pause"

parse_step(s) := {"type": "pause"} if {
	startswith(s, "pause:")
	d := substring(s, 6, -1)
	ns := lib.duration_ns(d)
	go_positive(d)
	ns <= lib.max_duration_ns
}

# go_positive(d) holds when the rollout controller reads the duration d as positive. Go's
# time.ParseDuration truncates each component to whole nanoseconds ("0.5ns" and "0.0009µs" are
# 0), so some component must be at least 1ns: a whole part of at least 1, or a fraction F (k
# digits) with F * unit >= 10^k, compared in integers (duration_ns rounds, and floats would
# put 0.001µs below 1ns).
go_positive(d) if {
	some m in regex.find_all_string_submatch_n(`([0-9]+)(\.([0-9]+))?(ns|us|µs|μs|ms|s|m|h)`, d, -1)
	at_least_1ns(m[1], m[3], lib.duration_unit_ns[m[4]])
}

at_least_1ns(whole, _, _) if lib.digits_to_number(whole) >= 1

at_least_1ns(_, fraction, unit) if {
	fraction != ""
	lib.digits_to_number(fraction) * unit >= lib.digits_to_number(concat("", ["1", regex.replace(fraction, `[0-9]`, "0")]))
}

# steps are the trimmed, comma-separated entries of the annotation; parsed_steps[i] is
# parse_step(steps[i]), or {"type": "invalid"}, parsed once for every rule below.
steps := [trim_space(s) | some s in split(steps_value, ",")]

parsed_steps := [p |
	some s in steps
	p := parse_or_invalid(s)
]

parse_or_invalid(s) := p if {
	p := parse_step(s)
} else := {"type": "invalid"}

step_hint := `each step must be a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" or "pause:<duration>" with a Go duration up to 8760h (e.g. "pause:5m")`

steps_violation contains {"field": field(steps_key), "msg": msg} if {
	trim_space(steps_value) == ""
	msg := sprintf(`value %s is an empty list: list at least one step, ending with "100%%" (e.g. "1,25%%,100%%")`, [lib.quote(steps_value)])
}

# The step rules report the first lib.max_reported steps at fault and one violation that counts
# the rest (step_findings): a value of 20,000 commas gets four violations, not 20,000.

# invalid_steps are the indexes of the steps that do not parse.
invalid_steps := [i |
	trim_space(steps_value) != ""
	some i, p in parsed_steps
	p.type == "invalid"
]

steps_violation contains {"field": field(steps_key), "msg": msg} if {
	some i in lib.reported(invalid_steps)
	msg := sprintf("step %d %s of %s is not valid: %s", [i + 1, lib.quote(steps[i]), lib.quote(steps_value), step_hint])
}

# Count steps and percent steps must each be non-decreasing. same_kind[kind] lists the steps of
# one kind in order, as {"index": i, "value": n}; decreasing_steps are the pairs of consecutive
# ones where the value drops.
same_kind[kind] := [{"index": i, "value": p.value} |
	some i, p in parsed_steps
	p.type == kind
] if {
	some kind in ["count", "percent"]
}

decreasing_steps := [{"kind": kind, "step": same[j], "before": same[j - 1]} |
	some kind, same in same_kind
	count(same) > 1
	some j in numbers.range(1, count(same) - 1)
	same[j].value < same[j - 1].value
]

steps_violation contains {"field": field(steps_key), "msg": msg} if {
	some d in lib.reported(decreasing_steps)
	msg := sprintf(
		"step %d %s of %s is smaller than step %d %s: %s steps must not decrease",
		[d.step.index + 1, lib.quote(steps[d.step.index]), lib.quote(steps_value), d.before.index + 1, lib.quote(steps[d.before.index]), d.kind],
	)
}

step_findings := {
	"steps are not valid": invalid_steps,
	"steps are smaller than the step of their kind before them": decreasing_steps,
}

steps_violation contains {"field": field(steps_key), "msg": msg} if {
	some what, findings in step_findings
	msg := lib.more_msg(findings, what)
}

# The last step that is not a pause must be "100%", or the rollout never finishes.
non_pause_steps := [p | some p in parsed_steps; p.type != "pause"]

steps_violation contains {"field": field(steps_key), "msg": msg} if {
	trim_space(steps_value) != ""
	count(invalid_steps) == 0
	not ends_at_100
	msg := sprintf(
		`value %s does not end with "100%%": the rollout would never finish; make "100%%" the last step that is not a pause (e.g. %s)`,
		[lib.quote(steps_value), ends_at_100_example],
	)
}

# ends_at_100_example is the value with ",100%" appended, or a description of that when the value
# is too long to repeat (lib.quote would cut the "100%" off).
ends_at_100_example := sprintf(`"%s,100%%"`, [v]) if {
	v := trim_right(trim_space(steps_value), ",")
	count(v) <= lib.quote_limit
} else := `the value followed by ",100%"`

ends_at_100 if non_pause_steps[count(non_pause_steps) - 1] == {"type": "percent", "value": 100}

# --- daemonguard.io/analysis --------------------------------------------------------------------
#
# The rules of rolloutapi.ParseGates, field by field. Stricter at admission only: an empty value
# (the controller reads it as no gates) and an interval with a fraction of a nanosecond.

analysis_key := "daemonguard.io/analysis"

analysis_value := value_of(analysis_key)

analysis_field := field(analysis_key)

# analysis_doc is the annotation's YAML; undefined when it is not YAML (yaml.unmarshal would
# raise an error).
analysis_doc := yaml.unmarshal(analysis_value) if yaml.is_valid(analysis_value)

# gate_fields maps each field of a gate to a description of its allowed values.
gate_fields := {
	"name": `a DNS label: at most 63 lower-case letters, digits and "-", starting and ending with a letter or digit (e.g. "errors")`,
	"query": `a non-empty PromQL string`,
	"max": "a number",
	"min": "a number",
	"interval": sprintf("a Go duration from %s to %s", [min_gate_interval, max_gate_interval]),
	"count": sprintf("an integer from 1 to %d", [max_gate_count]),
	"nodeLabel": `a Prometheus label name: letters, digits and "_", not starting with a digit (e.g. "instance")`,
	"baseline": "true or false",
}

required_gate_fields := {"name", "query"}

# Bounds of rolloutapi: MinGateInterval, MaxGateInterval, MaxGateCount.
min_gate_interval := "1s"

max_gate_interval := "1h"

max_gate_count := 100

# placeholders are the query's {{ x }} placeholders (rolloutapi.QueryPlaceholders), matched with
# the controller's expression.
placeholders := ["nodes", "revision", "old_revision", "name", "namespace"]

placeholder_regex := `\{\{\s*([A-Za-z_]*)\s*\}\}`

# gates[i] is the i-th entry (from 0) of the list when it is an object, without its null fields:
# the controller reads a null field as a field left out.
gates[i] := {k: v | some k, v in g; v != null} if {
	is_array(analysis_doc)
	some i, g in analysis_doc
	is_object(g)
}

# gate_label(i) names gate i in messages: gate 2 ("errors"), counting from 1.
gate_label(i) := sprintf("gate %d (%s)", [i + 1, lib.quote(gates[i].name)]) if {
	is_string(gates[i].name)
} else := sprintf("gate %d", [i + 1])

# gate_violation(i, msg) is a violation of gate i, prefixed with its label.
gate_violation(i, msg) := {"field": analysis_field, "msg": sprintf("%s: %s", [gate_label(i), msg])}

analysis_violation contains {"field": analysis_field, "msg": msg} if {
	not yaml.is_valid(analysis_value)
	msg := sprintf("value %s is not valid YAML: it must be %s", [lib.quote(analysis_value), known[analysis_key]])
}

analysis_violation contains {"field": analysis_field, "msg": msg} if {
	analysis_doc in {null, []}
	msg := sprintf("value %s lists no gate: list at least one, or remove the annotation", [lib.quote(analysis_value)])
}

analysis_violation contains {"field": analysis_field, "msg": msg} if {
	analysis_doc != null
	not is_array(analysis_doc)
	msg := sprintf("value %s is not a YAML list: it must be %s", [lib.quote(analysis_value), known[analysis_key]])
}

# max_gates is the most gates a DaemonSet may list: each is a Prometheus query made with the
# controller's credentials at every interval. The Go twin is rolloutapi.MaxGates
# (internal/rolloutapi/annotations.go); TestMaxGatesMatchesRolloutAPI in policies/policies_test.go
# holds the two equal.
max_gates := 10

analysis_violation contains {"field": analysis_field, "msg": msg} if {
	is_array(analysis_doc)
	count(analysis_doc) > max_gates
	msg := sprintf("value lists %d gates: at most %d gates are allowed per DaemonSet (each is a Prometheus query at every interval)", [count(analysis_doc), max_gates])
}

# The gate rules below collect their findings as indexes (and fields) first, report the first
# lib.max_reported of each with a message, and count the rest in one violation (gate_findings),
# so that a list of 10,000 gates gets a few violations per rule, not one per gate.

non_object_gates := [i |
	is_array(analysis_doc)
	some i, g in analysis_doc
	not is_object(g)
]

analysis_violation contains {"field": analysis_field, "msg": msg} if {
	is_array(analysis_doc)
	some i in lib.reported(non_object_gates)
	msg := sprintf(
		"gate %d %s is not an object: each gate must be an object with the fields %s",
		[i + 1, lib.quote(analysis_doc[i]), concat(", ", sort(object.keys(gate_fields)))],
	)
}

unknown_gate_fields := [[i, f] |
	some i, g in gates
	some f, _ in g
	not gate_fields[f]
]

analysis_violation contains gate_violation(i, msg) if {
	is_array(analysis_doc)
	some [i, f] in lib.reported(unknown_gate_fields)
	msg := sprintf("unknown field %s (a typo?); known fields: %s", [lib.quote(f), concat(", ", sort(object.keys(gate_fields)))])
}

missing_gate_fields := [[i, f] |
	some i, g in gates
	some f in required_gate_fields
	not f in object.keys(g)
]

analysis_violation contains gate_violation(i, msg) if {
	is_array(analysis_doc)
	some [i, f] in lib.reported(missing_gate_fields)
	msg := sprintf("%s is missing: it must be %s", [f, gate_fields[f]])
}

invalid_gate_fields := [[i, f] |
	some i, g in gates
	some f, v in g
	gate_fields[f]
	not valid_gate_field(f, v)
]

analysis_violation contains gate_violation(i, msg) if {
	is_array(analysis_doc)
	some [i, f] in lib.reported(invalid_gate_fields)
	msg := sprintf("%s %s is not allowed: it must be %s", [f, lib.quote(gates[i][f]), gate_fields[f]])
}

valid_gate_field("name", v) if {
	is_string(v)
	count(v) <= 63
	regex.match(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, v)
}

valid_gate_field("query", v) if {
	is_string(v)
	trim_space(v) != ""
}

valid_gate_field("max", v) if is_number(v)

valid_gate_field("min", v) if is_number(v)

valid_gate_field("interval", v) if {
	ns := lib.duration_ns(v)
	ns >= lib.duration_ns(min_gate_interval)
	ns <= lib.duration_ns(max_gate_interval)
	whole_nanoseconds(v)
}

valid_gate_field("count", v) if {
	lib.is_integer(v)
	v >= 1
	v <= max_gate_count
}

valid_gate_field("nodeLabel", v) if {
	is_string(v)
	regex.match(`^[a-zA-Z_][a-zA-Z0-9_]*$`, v)
}

valid_gate_field("baseline", v) if is_boolean(v)

# whole_nanoseconds(d) holds when no component of the duration d has a fraction finer than a
# nanosecond of its unit (at most 9 digits for s, 10 for m, 11 for h): the controller's
# time.ParseDuration truncates such fractions, and duration_ns rounds them.
whole_nanoseconds(d) if {
	every m in regex.find_all_string_submatch_n(`[0-9]+(\.([0-9]+))?(ns|us|µs|μs|ms|s|m|h)`, d, -1) {
		count(m[2]) <= fraction_digits[m[3]]
	}
}

fraction_digits := {"ns": 0, "us": 3, "µs": 3, "μs": 3, "ms": 6, "s": 9, "m": 10, "h": 11}

# Names must be unique; each later gate with a name names the first gate that has it.
# gate_names[i] is gate i's name, or null (a non-object entry or a name that is not a string);
# first_gate maps each name to the index of its first gate, in one pass (lib.first_index), not by
# comparing every pair of gates.
gate_names := [name_or_null(g) | some g in analysis_doc] if is_array(analysis_doc)

name_or_null(g) := g.name if {
	is_object(g)
	is_string(g.name)
} else := null

first_gate := lib.first_index(gate_names)

duplicate_gate_names := [i |
	some i, name in gate_names
	is_string(name)
	first_gate[name] != i
]

analysis_violation contains gate_violation(i, msg) if {
	is_array(analysis_doc)
	some i in lib.reported(duplicate_gate_names)
	msg := sprintf("name %s is used by gate %d too: names must be unique", [lib.quote(gate_names[i]), first_gate[gate_names[i]] + 1])
}

# unknown_placeholders are the distinct unknown placeholders of each gate, as [i, placeholder].
unknown_placeholders := sort({[i, m[0]] |
	some i, g in gates
	is_string(g.query)
	some m in regex.find_all_string_submatch_n(placeholder_regex, g.query, -1)
	not m[1] in placeholders
})

analysis_violation contains gate_violation(i, msg) if {
	is_array(analysis_doc)
	some [i, placeholder] in lib.reported(unknown_placeholders)
	msg := sprintf(
		"query placeholder %s is not allowed: it must be one of %s",
		[lib.quote(placeholder), concat(", ", [sprintf("{{ %s }}", [p]) | some p in placeholders])],
	)
}

queries_without_nodes := [i |
	some i, g in gates
	valid_gate_field("query", g.query)
	not "nodes" in {m[1] | some m in regex.find_all_string_submatch_n(placeholder_regex, g.query, -1)}
]

analysis_violation contains gate_violation(i, msg) if {
	is_array(analysis_doc)
	some i in lib.reported(queries_without_nodes)
	msg := sprintf(`query %s does not use {{ nodes }}: it must select the wave's nodes with it, e.g. node=~"{{ nodes }}"`, [lib.quote(gates[i].query)])
}

unbounded_gates := [i |
	some i, g in gates
	not "max" in object.keys(g)
	not "min" in object.keys(g)
]

analysis_violation contains gate_violation(i, "neither max nor min is set: set one or both to bound each node's value") if {
	is_array(analysis_doc)
	some i in lib.reported(unbounded_gates)
}

inverted_gates := [i |
	some i, g in gates
	is_number(g.min)
	is_number(g.max)
	g.min > g.max
]

analysis_violation contains gate_violation(i, msg) if {
	is_array(analysis_doc)
	some i in lib.reported(inverted_gates)
	msg := sprintf("min %v is above max %v: min must be at most max", [gates[i].min, gates[i].max])
}

gate_findings := {
	"entries are not gates (objects)": non_object_gates,
	"unknown fields of gates": unknown_gate_fields,
	"missing fields of gates": missing_gate_fields,
	"invalid fields of gates": invalid_gate_fields,
	"gates repeat an earlier gate's name": duplicate_gate_names,
	"query placeholders are not allowed": unknown_placeholders,
	"gates' queries do not use {{ nodes }}": queries_without_nodes,
	"gates set neither max nor min": unbounded_gates,
	"gates have min above max": inverted_gates,
}

analysis_violation contains {"field": analysis_field, "msg": msg} if {
	is_array(analysis_doc)
	some what, findings in gate_findings
	msg := lib.more_msg(findings, what)
}
