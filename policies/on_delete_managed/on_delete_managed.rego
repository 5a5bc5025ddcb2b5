# on_delete_managed: updateStrategy.type OnDelete and daemonguard's rollout controller go together.
#
# - OnDelete without the annotation daemonguard.io/rollout: managed and without a non-empty
#   daemonguard.io/on-delete-exempt: after a template change nothing replaces the pods until someone
#   deletes them by hand, so nodes silently keep running the old revision.
# - daemonguard.io/rollout: managed with any other type (RollingUpdate is the default): the built-in
#   DaemonSet controller would roll the pods itself and fight daemonguard's rollout controller.
package daemonguard.policies.on_delete_managed

import data.daemonguard.lib

enforcement := "warn"

type_field := "spec.updateStrategy.type"

violation contains {"field": type_field, "msg": msg} if {
	lib.strategy_type == "OnDelete"
	not lib.rollout_managed
	not lib.on_delete_exempt
	msg := concat("", [
		`updateStrategy.type "OnDelete" is not managed by daemonguard: nothing will roll the pods out after a template change, `,
		`they keep running the old revision until deleted by hand; add the annotation daemonguard.io/rollout: "managed" `,
		`to let daemonguard's rollout controller roll them out, or daemonguard.io/on-delete-exempt: "<reason>" if manual `,
		`replacement is intended`,
	])
}

violation contains {"field": type_field, "msg": msg} if {
	lib.rollout_opted_in
	lib.strategy_type != "OnDelete"
	msg := sprintf(
		`updateStrategy.type %s%s is not allowed with the annotation daemonguard.io/rollout: "managed": the built-in DaemonSet controller would roll the pods itself and fight daemonguard's rollout controller; the only allowed type is "OnDelete"`,
		[lib.quote(lib.strategy_type), default_note],
	)
}

default_note := " (the default)" if {
	lib.strategy_type_defaulted
} else := ""
