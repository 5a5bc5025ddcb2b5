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
	"daemonguard.io/on-delete-exempt": `a non-empty reason`,
	"daemonguard.io/inject": `"true" or "false"`,
	"daemonguard.io/analysis": `a YAML list of analysis gates, each an object with a name, a query, max, min or both, and optionally interval, count, nodeLabel and baseline`,
	"daemonguard.io/on-analysis-failure": `"halt" or "rollback"`,
}

field(key) := sprintf("metadata.annotations[%q]", [key])

# not_allowed(key, value) is the common message for a value outside what known[key] describes.
not_allowed(key, value) := sprintf("value %s is not allowed: it must be %s", [lib.quote(value), known[key]])

ours contains key if {
	some key, _ in lib.annotations
	startswith(key, prefix)
}

# Values that are not strings (e.g. an unquoted true or 5 in YAML).
violation contains {"field": field(key), "msg": msg} if {
	some key in ours
	value := lib.annotations[key]
	not is_string(value)
	msg := sprintf("value %s is not a string: annotation values are strings, quote it in YAML", [lib.quote(value)])
}

# Unknown keys.
violation contains {"field": field(key), "msg": msg} if {
	some key in ours
	not known[key]
	msg := sprintf("unknown daemonguard annotation %q (a typo?); known annotations: %s", [key, concat(", ", sort(object.keys(known)))])
}

# Checks of the value of each known key; only string values reach them.
value_of(key) := v if {
	v := lib.annotations[key]
	is_string(v)
}

violation contains {"field": field(key), "msg": not_allowed(key, value)} if {
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

valid("daemonguard.io/on-delete-exempt", value) if trim_space(value) != ""

valid("daemonguard.io/on-analysis-failure", value) if value in {"halt", "rollback"}

# steps and analysis gates are checked below, part by part.
valid("daemonguard.io/steps", _) := true

valid("daemonguard.io/analysis", _) := true

min_progress_deadline := n if {
	n := lib.param_number("rollout_annotations", "minProgressDeadlineSeconds")
} else := 30

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

# steps are the trimmed, comma-separated entries of the annotation.
steps := [trim_space(s) | some s in split(steps_value, ",")]

step_hint := `each step must be a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" or "pause:<duration>" with a Go duration up to 8760h (e.g. "pause:5m")`

violation contains {"field": field(steps_key), "msg": msg} if {
	trim_space(steps_value) == ""
	msg := sprintf(`value %s is an empty list: list at least one step, ending with "100%%" (e.g. "1,25%%,100%%")`, [lib.quote(steps_value)])
}

violation contains {"field": field(steps_key), "msg": msg} if {
	trim_space(steps_value) != ""
	some i, s in steps
	not parse_step(s)
	msg := sprintf("step %d %s of %s is not valid: %s", [i + 1, lib.quote(s), lib.quote(steps_value), step_hint])
}

# Count steps and percent steps must each be non-decreasing.
violation contains {"field": field(steps_key), "msg": msg} if {
	some kind in ["count", "percent"]
	same := [{"index": i, "step": s} | some i, s in steps; parse_step(s).type == kind]
	count(same) > 1
	some j in numbers.range(1, count(same) - 1)
	parse_step(same[j].step).value < parse_step(same[j - 1].step).value
	msg := sprintf(
		"step %d %s of %s is smaller than step %d %s: %s steps must not decrease",
		[same[j].index + 1, lib.quote(same[j].step), lib.quote(steps_value), same[j - 1].index + 1, lib.quote(same[j - 1].step), kind],
	)
}

# The last step that is not a pause must be "100%", or the rollout never finishes.
non_pause_steps := [s | some s in steps; not parse_step(s).type == "pause"]

violation contains {"field": field(steps_key), "msg": msg} if {
	trim_space(steps_value) != ""
	every s in steps {
		parse_step(s)
	}
	not ends_at_100
	msg := sprintf(
		`value %s does not end with "100%%": the rollout would never finish; make "100%%" the last step that is not a pause (e.g. "%s,100%%")`,
		[lib.quote(steps_value), trim_right(trim_space(steps_value), ",")],
	)
}

ends_at_100 if {
	last := non_pause_steps[count(non_pause_steps) - 1]
	parse_step(last) == {"type": "percent", "value": 100}
}

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
gate_label(i) := sprintf("gate %d (%q)", [i + 1, gates[i].name]) if {
	is_string(gates[i].name)
} else := sprintf("gate %d", [i + 1])

# gate_violation(i, msg) is a violation of gate i, prefixed with its label.
gate_violation(i, msg) := {"field": analysis_field, "msg": sprintf("%s: %s", [gate_label(i), msg])}

violation contains {"field": analysis_field, "msg": msg} if {
	not yaml.is_valid(analysis_value)
	msg := sprintf("value %s is not valid YAML: it must be %s", [lib.quote(analysis_value), known[analysis_key]])
}

violation contains {"field": analysis_field, "msg": msg} if {
	analysis_doc in {null, []}
	msg := sprintf("value %s lists no gate: list at least one, or remove the annotation", [lib.quote(analysis_value)])
}

violation contains {"field": analysis_field, "msg": msg} if {
	analysis_doc != null
	not is_array(analysis_doc)
	msg := sprintf("value %s is not a YAML list: it must be %s", [lib.quote(analysis_value), known[analysis_key]])
}

violation contains {"field": analysis_field, "msg": msg} if {
	is_array(analysis_doc)
	some i, g in analysis_doc
	not is_object(g)
	msg := sprintf(
		"gate %d %s is not an object: each gate must be an object with the fields %s",
		[i + 1, lib.quote(g), concat(", ", sort(object.keys(gate_fields)))],
	)
}

violation contains gate_violation(i, msg) if {
	some i, g in gates
	some f, _ in g
	not gate_fields[f]
	msg := sprintf("unknown field %q (a typo?); known fields: %s", [f, concat(", ", sort(object.keys(gate_fields)))])
}

violation contains gate_violation(i, msg) if {
	some i, g in gates
	some f in required_gate_fields
	not f in object.keys(g)
	msg := sprintf("%s is missing: it must be %s", [f, gate_fields[f]])
}

violation contains gate_violation(i, msg) if {
	some i, g in gates
	some f, v in g
	gate_fields[f]
	not valid_gate_field(f, v)
	msg := sprintf("%s %s is not allowed: it must be %s", [f, lib.quote(v), gate_fields[f]])
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

violation contains gate_violation(i, msg) if {
	some i, g in gates
	some j, other in gates
	j < i
	is_string(g.name)
	other.name == g.name
	not earlier_duplicate(i, j)
	msg := sprintf("name %q is used by gate %d too: names must be unique", [g.name, j + 1])
}

# earlier_duplicate(i, j) holds when a gate before j has gate i's name: only the first is named.
earlier_duplicate(i, j) if {
	some k, other in gates
	k < j
	other.name == gates[i].name
}

violation contains gate_violation(i, msg) if {
	some i, g in gates
	is_string(g.query)
	some m in regex.find_all_string_submatch_n(placeholder_regex, g.query, -1)
	not m[1] in placeholders
	msg := sprintf(
		"query placeholder %q is not allowed: it must be one of %s",
		[m[0], concat(", ", [sprintf("{{ %s }}", [p]) | some p in placeholders])],
	)
}

violation contains gate_violation(i, msg) if {
	some i, g in gates
	valid_gate_field("query", g.query)
	not "nodes" in {m[1] | some m in regex.find_all_string_submatch_n(placeholder_regex, g.query, -1)}
	msg := sprintf(`query %q does not use {{ nodes }}: it must select the wave's nodes with it, e.g. node=~"{{ nodes }}"`, [g.query])
}

violation contains gate_violation(i, "neither max nor min is set: set one or both to bound each node's value") if {
	some i, g in gates
	not "max" in object.keys(g)
	not "min" in object.keys(g)
}

violation contains gate_violation(i, msg) if {
	some i, g in gates
	is_number(g.min)
	is_number(g.max)
	g.min > g.max
	msg := sprintf("min %v is above max %v: min must be at most max", [g.min, g.max])
}
