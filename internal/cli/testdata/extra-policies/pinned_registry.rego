# An example site policy, as a platform team would keep it in git: DaemonSet images must come from
# the company registry.
package daemonguard.policies.pinned_registry

enforcement := "deny"

violation contains {"field": sprintf("spec.template.spec.containers[%d].image", [i]), "msg": msg} if {
	some i, c in input.object.spec.template.spec.containers
	not startswith(c.image, data.daemonguard.parameters.policies.pinned_registry.default.registry)
	msg := sprintf("image %q is not from %q", [c.image, data.daemonguard.parameters.policies.pinned_registry.default.registry])
}
