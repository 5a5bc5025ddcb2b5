# inject: what daemonguard's mutating webhook adds to a DaemonSet's pod template. `decision` is
# always defined, with exactly one value:
#
#   {"inject": true, "tolerations": [...], "priorityClassName": "..."}  (priorityClassName omitted
#                                                                        when configured as "")
#   {"inject": false, "reason": "..."}
#
# The Go side appends the tolerations the template lacks and sets the priority class when the
# template names none. kube-system and daemonguard's own namespace never reach this policy, nor
# does a DaemonSet outside the namespaces an administrator marked for node agents
# (daemonguard.io/node-agents: "true") or one labelled daemonguard.io/ignore: "true"
# (webhook.InjectionScope): it is asked only about node agents.
package daemonguard.inject

import data.daemonguard.lib

# settings are parameters.inject with parameters.inject.namespaceClasses[<class>] merged over it.
base_settings := s if {
	s := lib.parameters.inject
	is_object(s)
} else := {}

class_settings := s if {
	s := base_settings.namespaceClasses[lib.namespace_class]
	is_object(s)
} else := {}

settings := object.union(base_settings, class_settings)

enabled if not settings.enabled == false

priority_class_name := n if {
	n := settings.priorityClassName
	is_string(n)
} else := ""

tolerations := [t |
	list := settings.tolerations
	is_array(list)
	some t in list
	is_object(t)
]

excluded_namespaces := n if {
	n := settings.excludedNamespaces
	is_array(n)
} else := []

excluded_labels := l if {
	l := settings.excludedLabels
	is_object(l)
} else := {}

opt_out_annotation := "daemonguard.io/inject"

# skip_reason says why nothing is injected; the first matching reason wins.
skip_reason := sprintf(`the DaemonSet opts out with the annotation %s: "false"`, [opt_out_annotation]) if {
	lib.annotations[opt_out_annotation] == "false"
} else := sprintf("injection is disabled (inject.enabled: false) for namespace class %q", [lib.namespace_class]) if {
	not enabled
} else := sprintf("namespace %q is in inject.excludedNamespaces", [lib.namespace_name]) if {
	lib.namespace_name in excluded_namespaces
} else := sprintf("the DaemonSet's labels match inject.excludedLabels %v", [excluded_labels]) if {
	count(excluded_labels) > 0
	every k, v in excluded_labels {
		lib.labels[k] == v
	}
} else := "nothing to inject: inject.tolerations is empty and inject.priorityClassName is empty" if {
	count(tolerations) == 0
	priority_class_name == ""
}

decision := {"inject": false, "reason": skip_reason} if {
	is_string(skip_reason)
} else := {"inject": true, "tolerations": tolerations} if {
	priority_class_name == ""
} else := {"inject": true, "tolerations": tolerations, "priorityClassName": priority_class_name}
