# Helpers shared by daemonguard's built-in policies: safe access to the DaemonSet in input.object,
# namespace classes and per-class parameters, and parsers for the value formats policies check.
# Every helper tolerates missing fields and odd types: it never raises an error at evaluation time.
package daemonguard.lib

# --- generic ------------------------------------------------------------------------------------

# as_object(x) is x when x is an object, else {}.
as_object(x) := x if {
	is_object(x)
} else := {}

# as_array(x) is x when x is an array, else [].
as_array(x) := x if {
	is_array(x)
} else := []

# get(x, path, fallback) is object.get(x, path, fallback) that also accepts a non-object x.
get(x, path, fallback) := object.get(x, path, fallback) if {
	is_object(x)
} else := fallback

# quote(v) renders a value for a message: strings quoted ("50%"), anything else as Rego prints it,
# cut after quote_limit characters of the value (or of its printed form), with the count of the rest:
#
#   "1" and 20,000 commas:  "1,,,,,,,,,"… (19881 more characters)
#   (shortened here: the quotes hold the first 120 characters)
#
# A message quotes what a tenant wrote, so without the cut a message, and the answer holding every
# message, would grow with the value. The cut is by characters (Unicode code points), never inside
# one, and the marker stands outside the quotes, so the quoted part is the value's exact prefix.
quote(v) := sprintf("%q", [v]) if {
	is_string(v)
	count(v) <= quote_limit
} else := sprintf("%q%s", [substring(v, 0, quote_limit), rest_marker(count(v))]) if {
	is_string(v)
} else := cut(sprintf("%v", [v]))

# quote_limit is how many characters of a value quote keeps.
quote_limit := 120

# cut(s) is s when it has at most quote_limit characters, else its start and the count of the rest.
cut(s) := s if {
	count(s) <= quote_limit
} else := concat("", [substring(s, 0, quote_limit), rest_marker(count(s))])

# rest_marker(n) follows the first quote_limit of n characters: "… (5 more characters)".
rest_marker(n) := "… (1 more character)" if {
	n == quote_limit + 1
} else := sprintf("… (%d more characters)", [n - quote_limit])

# --- capped lists of findings -------------------------------------------------------------------
#
# A rule that checks each element of a list (steps, gates, tolerations, containers, annotations)
# reports the first max_reported elements it finds at fault, each with its own message, and then
# one violation that counts the rest (more_msg): the answer stays a few violations long however
# long the list is. Collect the findings as small values first (indexes, keys) and build messages
# only for reported(findings), so that the work is linear in the list and the text is bounded.

# max_reported is how many findings of one rule get a message of their own.
max_reported := 3

# reported(findings) is the first max_reported elements of the array findings.
reported(findings) := array.slice(findings, 0, max_reported)

# more_msg(findings, what) counts the findings past the reported ones, e.g. "and 19997 more steps
# are not valid (only the first 3 are reported)"; undefined when every finding was reported.
more_msg(findings, what) := sprintf("and %d more %s (only the first %d are reported)", [count(findings) - max_reported, what, max_reported]) if {
	count(findings) > max_reported
}

# first_index(values) maps each distinct value of the array values to the index of its first
# occurrence, in O(n log n): sorting [value, index] pairs puts each value's first index at the start
# of its run. (Comparing every pair would be quadratic: 10,000 gates make 50 million comparisons.)
first_index(values) := object.union(first, rest) if {
	pairs := sort([[v, i] | some i, v in values])
	first := {p[0]: p[1] | p := pairs[0]}
	rest := {p[0]: p[1] | some k, p in pairs; k > 0; pairs[k - 1][0] != p[0]}
}

# is_integer(v) holds for a number without fractional part.
is_integer(v) if {
	is_number(v)
	v == floor(v)
}

# digits_to_number(s) is the value of a string of decimal digits; leading zeros are fine.
digits_to_number(s) := n if {
	is_string(s)
	regex.match(`^[0-9]+$`, s)
	t := trim_left(s, "0")
	n := to_number_or_zero(t)
}

to_number_or_zero(t) := 0 if {
	t == ""
} else := to_number(t)

# int_or_percent(v) parses a Kubernetes IntOrString such as maxUnavailable:
#   {"type": "int", "value": n}     for a non-negative integer n,
#   {"type": "percent", "value": n} for a string "N%" with 0 <= N <= 100,
# and is undefined for anything else ("abc", "5", -1, 1.5, "150%", null).
int_or_percent(v) := {"type": "int", "value": v} if {
	is_integer(v)
	v >= 0
}

int_or_percent(v) := {"type": "percent", "value": n} if {
	is_string(v)
	regex.match(`^[0-9]+%$`, v)
	n := digits_to_number(trim_suffix(v, "%"))
	n <= 100
}

# duration_regex matches a Go duration of positive components, like 30s, 5m, 1h30m, 1.5h, 250ms.
duration_regex := `^([0-9]+(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h))+$`

duration_unit_ns := {
	"ns": 1,
	"us": 1000,
	"µs": 1000,
	"μs": 1000,
	"ms": 1000000,
	"s": 1000000000,
	"m": 60000000000,
	"h": 3600000000000,
}

# duration_ns(s) is the length in nanoseconds (rounded to an integer) of a Go duration string
# matching duration_regex; undefined for anything else (including "0", "-5m", "5", "1d").
duration_ns(s) := round(sum(parts)) if {
	is_string(s)
	regex.match(duration_regex, s)
	parts := [ns |
		some m in regex.find_all_string_submatch_n(`([0-9]+)(\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h)`, s, -1)
		ns := (digits_to_number(m[1]) + fraction(m[2])) * duration_unit_ns[m[3]]
	]
}

# duration_seconds(s) is duration_ns(s) in seconds.
duration_seconds(s) := duration_ns(s) / 1000000000

# fraction(".25") is 0.25; fraction("") is 0.
fraction(f) := 0 if {
	f == ""
} else := to_number(concat("", ["0", f])) if {
	regex.match(`^\.[0-9]+$`, f)
} else := 0

# max_duration_ns caps durations in annotations at one year (8760h), far below what Go's
# time.ParseDuration can hold, so the rollout controller never overflows.
max_duration_ns := 31536000000000000

# is_qualified_name(s) holds for a Kubernetes label key: [prefix/]name, where prefix is a DNS
# subdomain (at most 253 characters) and name at most 63 characters of [A-Za-z0-9-_.], starting and
# ending with an alphanumeric character.
is_qualified_name(s) if {
	is_string(s)
	parts := split(s, "/")
	count(parts) == 1
	is_qualified_name_part(parts[0])
}

is_qualified_name(s) if {
	is_string(s)
	parts := split(s, "/")
	count(parts) == 2
	count(parts[0]) <= 253
	regex.match(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`, parts[0])
	is_qualified_name_part(parts[1])
}

is_qualified_name_part(n) if {
	count(n) <= 63
	regex.match(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`, n)
}

# --- the DaemonSet ------------------------------------------------------------------------------
#
# The accessors below read fields by reference and fall back with `else`, rather than through
# as_object/get: OPA caches a function's result keyed by its arguments, so calling a function with
# the DaemonSet (or its pod template) hashes the whole object on every call, and reading a field by
# reference converts only that field of the input. Each reads its whole path from input.object:
# a reference into anything but an object is undefined, so the result is the same as going through
# the accessor above it, and a review evaluates one rule per accessor instead of the chain.
# Benchmarks: docs/performance.md.

# daemonset is input.object, or {} when absent.
daemonset := o if {
	o := input.object
	is_object(o)
} else := {}

metadata := m if {
	m := input.object.metadata
	is_object(m)
} else := {}

annotations := a if {
	a := input.object.metadata.annotations
	is_object(a)
} else := {}

labels := l if {
	l := input.object.metadata.labels
	is_object(l)
} else := {}

spec := s if {
	s := input.object.spec
	is_object(s)
} else := {}

update_strategy := u if {
	u := input.object.spec.updateStrategy
	is_object(u)
} else := {}

# strategy_type is spec.updateStrategy.type, "RollingUpdate" (the Kubernetes default) when absent.
strategy_type := t if {
	t := input.object.spec.updateStrategy.type
	t != null
} else := "RollingUpdate"

# strategy_type_defaulted holds when spec.updateStrategy.type is absent.
strategy_type_defaulted if not has_value(update_strategy, "type")

# rolling_update is spec.updateStrategy.rollingUpdate, or {} when absent.
rolling_update := r if {
	r := input.object.spec.updateStrategy.rollingUpdate
	is_object(r)
} else := {}

pod_template := t if {
	t := input.object.spec.template
	is_object(t)
} else := {}

pod_spec := s if {
	s := input.object.spec.template.spec
	is_object(s)
} else := {}

# containers lists the pod template's init and regular containers, in order, each as
# {"field": "spec.template.spec.containers[0]", "name": "nginx", "container": {...}}.
containers := [entry |
	some kind in ["initContainers", "containers"]
	list := pod_spec[kind]
	is_array(list)
	some i, c in list
	is_object(c)
	entry := {
		"field": sprintf("spec.template.spec.%s[%d]", [kind, i]),
		"name": object.get(c, "name", ""),
		"container": c,
	}
]

# has_value(obj, key) holds when obj[key] is present and not null.
has_value(obj, key) if {
	is_object(obj)
	obj[key] != null
}

# annotation(key) is the value of annotation key on the DaemonSet; undefined when absent.
annotation(key) := annotations[key]

# rollout_opted_in holds when the DaemonSet asks for daemonguard's rollout controller with the
# annotation daemonguard.io/rollout: managed, whatever its update strategy.
rollout_opted_in if annotations["daemonguard.io/rollout"] == "managed"

# rollout_managed holds when daemonguard's rollout controller rolls the DaemonSet out: it opts in
# and uses the OnDelete strategy (with any other the built-in controller rolls the pods itself).
# It is rolloutapi.IsManaged in Go; internal/rolloutapi tests that the two agree.
rollout_managed if {
	rollout_opted_in
	strategy_type == "OnDelete"
}

# on_delete_exempt holds when the DaemonSet carries a non-empty daemonguard.io/on-delete-exempt.
on_delete_exempt if {
	reason := annotations["daemonguard.io/on-delete-exempt"]
	is_string(reason)
	trim_space(reason) != ""
}

# --- namespace classes and parameters -----------------------------------------------------------

# parameters is data.daemonguard.parameters, or {} when absent.
parameters := p if {
	p := data.daemonguard.parameters
	is_object(p)
} else := {}

namespace_name := n if {
	n := input.namespace.name
	is_string(n)
} else := ""

namespace_labels := l if {
	l := input.namespace.labels
	is_object(l)
} else := {}

# class_matches(class) holds when a namespaceClasses entry matches the input's namespace: its name
# is in `namespaces`, or its labels include every pair of a non-empty `matchLabels`.
class_matches(class) if {
	names := class.namespaces
	is_array(names)
	namespace_name in names
}

class_matches(class) if {
	selector := class.matchLabels
	is_object(selector)
	count(selector) > 0
	every k, v in selector {
		namespace_labels[k] == v
	}
}

matching_classes := [name |
	classes := parameters.namespaceClasses
	is_array(classes)
	some class in classes
	is_object(class)
	name := class.name
	is_string(name)
	class_matches(class)
]

# namespace_class is the name of the first namespaceClasses entry matching the input's namespace,
# or "default".
namespace_class := matching_classes[0] if {
	count(matching_classes) > 0
} else := "default"

# params(policy) is parameters.policies[policy].default with the entry of the namespace's class
# merged over it.
params(policy) := object.union(policy_class_params(policy, "default"), policy_class_params(policy, namespace_class))

policy_class_params(policy, class) := p if {
	p := parameters.policies[policy][class]
	is_object(p)
} else := {}

# param_number(policy, key) is params(policy)[key] when it is a number; undefined otherwise, so a
# check whose parameter is missing or malformed is skipped rather than failing evaluation.
param_number(policy, key) := n if {
	n := params(policy)[key]
	is_number(n)
}

# --- cluster facts ------------------------------------------------------------------------------

# matching_nodes is input.cluster.matchingNodes; undefined offline (no input.cluster).
matching_nodes := n if {
	n := input.cluster.matchingNodes
	is_integer(n)
	n >= 0
}
