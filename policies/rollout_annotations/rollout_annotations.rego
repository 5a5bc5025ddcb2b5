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

# steps are checked below, step by step.
valid("daemonguard.io/steps", _) := true

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
