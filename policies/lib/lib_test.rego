package daemonguard.lib

# --- generic helpers ----------------------------------------------------------------------------

test_as_object_and_as_array if {
	as_object({"a": 1}) == {"a": 1}
	as_object("x") == {}
	as_object(null) == {}
	as_array([1]) == [1]
	as_array({"a": 1}) == []
}

test_get_tolerates_non_objects if {
	get({"a": {"b": 2}}, ["a", "b"], 0) == 2
	get({"a": "str"}, ["a", "b"], 0) == 0
	get("not an object", "a", 7) == 7
	get(null, ["a"], []) == []
}

test_quote if {
	quote("50%") == `"50%"`
	quote(1) == "1"
	quote(true) == "true"
	quote(null) == "null"
}

repeat(s, n) := concat("", [s | some _ in numbers.range(1, n)])

test_quote_keeps_120_characters if {
	quote(repeat("a", 120)) == sprintf("%q", [repeat("a", 120)])
	quote(repeat("a", 121)) == sprintf(`"%s"… (1 more character)`, [repeat("a", 120)])
	quote(concat("", ["1", repeat(",", 20000)])) == sprintf(`"1%s"… (19881 more characters)`, [repeat(",", 119)])

	# Characters, not bytes: a cut never splits one.
	quote(repeat("é", 200)) == sprintf(`"%s"… (80 more characters)`, [repeat("é", 120)])

	# Quotes inside the value are escaped before the cut is counted from the value.
	quote(repeat(`"`, 121)) == sprintf(`"%s"… (1 more character)`, [repeat(`\"`, 120)])
}

test_quote_cuts_printed_values if {
	long := [n | some n in numbers.range(1, 10000)]
	printed := sprintf("%v", [long])
	quote(long) == sprintf("%s… (%d more characters)", [substring(printed, 0, 120), count(printed) - 120])
	quote({"a": 1}) == `{"a": 1}`
}

# A hostile value: the quote of 60,000 characters is 147 characters long.
test_quote_of_a_huge_value_is_short if {
	count(quote(repeat("x", 60000))) == 147
}

test_reported_and_more_msg if {
	reported([]) == []
	reported([1, 2]) == [1, 2]
	reported([1, 2, 3, 4, 5]) == [1, 2, 3]
	not more_msg([1, 2, 3], "steps are not valid")
	more_msg([1, 2, 3, 4, 5], "steps are not valid") == "and 2 more steps are not valid (only the first 3 are reported)"
	more_msg(numbers.range(1, 20000), "x") == "and 19997 more x (only the first 3 are reported)"
}

test_first_index if {
	first_index([]) == {}
	first_index(["a", "b", "a", null, "b", "c", null]) == {"a": 0, "b": 1, null: 3, "c": 5}
	first_index([1, "1", 1]) == {1: 0, "1": 1}

	# Linear enough for a hostile list: 20,000 values, 3 distinct.
	first_index([x | some i in numbers.range(0, 19999); x := ["a", "b", "c"][i % 3]]) == {"a": 0, "b": 1, "c": 2}
}

test_is_integer if {
	is_integer(0)
	is_integer(42)
	is_integer(-3)
	not is_integer(1.5)
	not is_integer("1")
	not is_integer(null)
}

test_digits_to_number if {
	digits_to_number("0") == 0
	digits_to_number("000") == 0
	digits_to_number("007") == 7
	digits_to_number("120") == 120
	not digits_to_number("")
	not digits_to_number("1.5")
	not digits_to_number("-1")
	not digits_to_number(5)
}

test_int_or_percent_valid if {
	int_or_percent(0) == {"type": "int", "value": 0}
	int_or_percent(3) == {"type": "int", "value": 3}
	int_or_percent("0%") == {"type": "percent", "value": 0}
	int_or_percent("50%") == {"type": "percent", "value": 50}
	int_or_percent("100%") == {"type": "percent", "value": 100}
	int_or_percent("007%") == {"type": "percent", "value": 7}
}

test_int_or_percent_garbage if {
	every v in ["abc", "5", "", "%", "-5%", "101%", "150%", " 5%", "5.5%", "5 %"] {
		not int_or_percent(v)
	}
	every v in [-1, 1.5, null, true, [], {}] {
		not int_or_percent(v)
	}
}

test_duration_seconds_valid if {
	duration_seconds("30s") == 30
	duration_seconds("5m") == 300
	duration_seconds("1h30m") == 5400
	duration_seconds("1.5h") == 5400
	duration_seconds("250ms") == 0.25
	duration_ns("1ms") == 1000000
	duration_ns("1.5µs") == 1500
	duration_ns("0.1s") == 100000000
	duration_ns("1h1m1s1ms1us1ns") == 3661001001001
	duration_seconds("0s") == 0
	duration_seconds("1m0.5s") == 60.5
	duration_seconds("0010s") == 10
}

test_duration_seconds_garbage if {
	every v in ["", "0", "5", "-5m", "+5m", "1d", "5 m", "m", "1.m", ".5m", "1h 30m", "5mins"] {
		not duration_seconds(v)
	}
	not duration_seconds(30)
	not duration_seconds(null)
}

test_duration_seconds_huge_is_safe if {
	duration_ns("99999999999999999999999h") > max_duration_ns
}

test_is_qualified_name if {
	every k in ["topology.kubernetes.io/zone", "zone", "kubernetes.io/hostname", "my-label_1.x", "a/B"] {
		is_qualified_name(k)
	}
	every k in ["", "/zone", "a/b/c", "Topology.io/zone", "-zone", "zone-", "example.com/", "a b", concat("", [x | some _ in numbers.range(1, 64); x := "a"])] {
		not is_qualified_name(k)
	}
	not is_qualified_name(5)
}

# --- the DaemonSet ------------------------------------------------------------------------------

test_defaults_without_object if {
	daemonset == {} with input as {}
	strategy_type == "RollingUpdate" with input as {}
	strategy_type_defaulted with input as {}
	rolling_update == {} with input as {}
	containers == [] with input as {}
	annotations == {} with input as {"object": {"metadata": {"annotations": null}}}
}

test_strategy_type if {
	strategy_type == "OnDelete" with input as {"object": {"spec": {"updateStrategy": {"type": "OnDelete"}}}}
	not strategy_type_defaulted with input as {"object": {"spec": {"updateStrategy": {"type": "OnDelete"}}}}
	strategy_type == "RollingUpdate" with input as {"object": {"spec": {"updateStrategy": {"type": null}}}}
	strategy_type == "RollingUpdate" with input as {"object": {"spec": {"updateStrategy": "garbage"}}}
	strategy_type == "RollingUpdate" with input as {"object": "garbage"}
}

test_containers_lists_init_and_regular_containers_in_order if {
	pod := {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}, "garbage", {"name": "b"}]}
	got := containers with input as {"object": {"spec": {"template": {"spec": pod}}}}
	[c.field | some c in got] == [
		"spec.template.spec.initContainers[0]",
		"spec.template.spec.containers[0]",
		"spec.template.spec.containers[2]",
	]
	[c.name | some c in got] == ["init", "a", "b"]
}

test_rollout_managed_and_exempt if {
	opted_in := {"metadata": {"annotations": {"daemonguard.io/rollout": "managed"}}}
	rollout_opted_in with input as {"object": opted_in}
	not rollout_managed with input as {"object": opted_in}
	rollout_managed with input as {"object": object.union(opted_in, {"spec": {"updateStrategy": {"type": "OnDelete"}}})}
	not rollout_managed with input as {"object": {"metadata": {"annotations": {"daemonguard.io/rollout": "Managed"}}, "spec": {"updateStrategy": {"type": "OnDelete"}}}}
	on_delete_exempt with input as {"object": {"metadata": {"annotations": {"daemonguard.io/on-delete-exempt": "node-local storage"}}}}
	not on_delete_exempt with input as {"object": {"metadata": {"annotations": {"daemonguard.io/on-delete-exempt": "  "}}}}
	not on_delete_exempt with input as {"object": {"metadata": {"annotations": {"daemonguard.io/on-delete-exempt": true}}}}
}

# --- namespace classes and parameters (parameters.yaml: system = [kube-system]) ---------------------

test_namespace_class_from_parameters_yaml if {
	namespace_class == "system" with input as {"namespace": {"name": "kube-system", "labels": {}}}
	namespace_class == "default" with input as {"namespace": {"name": "apps", "labels": {}}}
	namespace_class == "default" with input as {}
}

classes := {"namespaceClasses": [
	{"name": "critical", "namespaces": ["kube-system", "monitoring"], "matchLabels": {}},
	{"name": "prod", "namespaces": [], "matchLabels": {"env": "prod", "tier": "1"}},
	{"name": "monitoring-late", "namespaces": ["monitoring"]},
	"garbage",
	{"name": 5, "namespaces": ["numbers"]},
]}

test_namespace_class_by_name_first_match_wins if {
	namespace_class == "critical" with input as {"namespace": {"name": "monitoring", "labels": {}}}
		with data.daemonguard.parameters as classes
}

test_namespace_class_by_labels if {
	namespace_class == "prod" with input as {"namespace": {"name": "shop", "labels": {"env": "prod", "tier": "1", "x": "y"}}}
		with data.daemonguard.parameters as classes
	namespace_class == "default" with input as {"namespace": {"name": "shop", "labels": {"env": "prod"}}}
		with data.daemonguard.parameters as classes
}

test_empty_match_labels_match_nothing if {
	namespace_class == "default" with input as {"namespace": {"name": "x", "labels": {"a": "b"}}}
		with data.daemonguard.parameters as {"namespaceClasses": [{"name": "all", "namespaces": [], "matchLabels": {}}]}
}

test_namespace_class_garbage_parameters if {
	namespace_class == "default" with input as {"namespace": {"name": "numbers", "labels": {}}}
		with data.daemonguard.parameters as classes
	namespace_class == "default" with input as {"namespace": {"name": "kube-system", "labels": {}}}
		with data.daemonguard.parameters as {"namespaceClasses": "kube-system"}
	namespace_class == "default" with input as {"namespace": {"name": "kube-system", "labels": {}}}
		with data.daemonguard.parameters as "garbage"
}

test_params_merge_class_over_default if {
	p := {"policies": {"x": {"default": {"a": 1, "b": 2}, "system": {"b": 3}}}, "namespaceClasses": [{"name": "system", "namespaces": ["kube-system"]}]}
	params("x") == {"a": 1, "b": 3} with input as {"namespace": {"name": "kube-system", "labels": {}}}
		with data.daemonguard.parameters as p
	params("x") == {"a": 1, "b": 2} with input as {"namespace": {"name": "apps", "labels": {}}}
		with data.daemonguard.parameters as p
	params("missing") == {} with input as {"namespace": {"name": "apps", "labels": {}}}
		with data.daemonguard.parameters as p
}

test_params_from_parameters_yaml if {
	params("rolling_update_budget").maxUnavailablePercent == 50 with input as {"namespace": {"name": "apps", "labels": {}}}
	params("rolling_update_budget").maxUnavailablePercent == 25 with input as {"namespace": {"name": "kube-system", "labels": {}}}
	params("revision_history") == {"minRevisionHistoryLimit": 5, "maxRevisionHistoryLimit": 30, "minReadySeconds": 0} with input as {"namespace": {"name": "kube-system", "labels": {}}}
}

test_param_number_skips_garbage if {
	p := {"policies": {"x": {"default": {"n": "ten", "m": 10}}}}
	not param_number("x", "n") with data.daemonguard.parameters as p
	not param_number("x", "missing") with data.daemonguard.parameters as p
	param_number("x", "m") == 10 with data.daemonguard.parameters as p
}

test_matching_nodes if {
	not matching_nodes with input as {"operation": "CHECK"}
	matching_nodes == 4 with input as {"cluster": {"nodes": 5, "matchingNodes": 4}}
	not matching_nodes with input as {"cluster": {"nodes": 5, "matchingNodes": "4"}}
	not matching_nodes with input as {"cluster": null}
}
