package charts

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestPodsMeetRestrictedPodSecurity checks the fields of the restricted Pod Security Standard
// (and the user and group the image runs as) on every rendered pod template.
func TestPodsMeetRestrictedPodSecurity(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			for _, d := range typedObjects[*appsv1.Deployment](objects(t, render(t, c))) {
				for _, problem := range restrictedProblems(&d.Spec.Template.Spec) {
					t.Errorf("Deployment %s: %s", d.Name, problem)
				}
			}
		})
	}
}

// restrictedProblems lists how a pod spec falls short of the restricted Pod Security Standard.
func restrictedProblems(spec *corev1.PodSpec) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		add("shares a host namespace")
	}
	if spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		add("automountServiceAccountToken is not true; the binary needs the API")
	}
	sc := spec.SecurityContext
	switch {
	case sc == nil:
		add("no pod securityContext")
	default:
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			add("pod runAsNonRoot is not true")
		}
		if sc.RunAsUser == nil || *sc.RunAsUser != 65532 {
			add("pod runAsUser is not 65532")
		}
		if sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
			add("pod runAsGroup is not 65532")
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			add("pod seccompProfile is not RuntimeDefault")
		}
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			add("volume %s is a hostPath", v.Name)
		}
	}
	for _, container := range slices.Concat(spec.InitContainers, spec.Containers) {
		csc := container.SecurityContext
		if csc == nil {
			add("container %s has no securityContext", container.Name)
			continue
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			add("container %s allowPrivilegeEscalation is not false", container.Name)
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			add("container %s readOnlyRootFilesystem is not true", container.Name)
		}
		if csc.Privileged != nil && *csc.Privileged {
			add("container %s is privileged", container.Name)
		}
		if csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) != 0 {
			add("container %s does not drop ALL capabilities (and add none)", container.Name)
		}
		if csc.RunAsUser != nil && *csc.RunAsUser == 0 {
			add("container %s runs as root", container.Name)
		}
		for _, p := range container.Ports {
			if p.HostPort != 0 {
				add("container %s binds host port %d", container.Name, p.HostPort)
			}
		}
		if container.Resources.Requests.Cpu().IsZero() || container.Resources.Requests.Memory().IsZero() || container.Resources.Limits.Memory().IsZero() {
			add("container %s lacks CPU and memory requests or a memory limit", container.Name)
		}
	}
	return problems
}

// rbac is the rendered RBAC, enough to answer "may this ServiceAccount make this request".
type rbac struct {
	roles               map[string][]rbacv1.PolicyRule // by namespace/name
	clusterRoles        map[string][]rbacv1.PolicyRule
	roleBindings        []*rbacv1.RoleBinding
	clusterRoleBindings []*rbacv1.ClusterRoleBinding
}

func renderedRBAC(objs []object) rbac {
	r := rbac{roles: map[string][]rbacv1.PolicyRule{}, clusterRoles: map[string][]rbacv1.PolicyRule{}}
	for _, role := range typedObjects[*rbacv1.Role](objs) {
		r.roles[role.Namespace+"/"+role.Name] = role.Rules
	}
	for _, role := range typedObjects[*rbacv1.ClusterRole](objs) {
		r.clusterRoles[role.Name] = role.Rules
	}
	r.roleBindings = typedObjects[*rbacv1.RoleBinding](objs)
	r.clusterRoleBindings = typedObjects[*rbacv1.ClusterRoleBinding](objs)
	return r
}

// request is one API request; name is the object's name, or the metadata.name field selector of a
// list or watch ("" for none). namespace is "" for cluster-scoped objects and all-namespace lists.
type request struct {
	verb, group, resource, namespace, name string
}

func (q request) String() string {
	return fmt.Sprintf("%s %s.%s %q in namespace %q", q.verb, q.resource, q.group, q.name, q.namespace)
}

// allows evaluates RBAC the way the API server's authorizer does, for one ServiceAccount.
func (r rbac) allows(saNamespace, saName string, q request) bool {
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == saNamespace && s.Name == saName
		})
	}
	for _, b := range r.clusterRoleBindings {
		if bound(b.Subjects) && b.RoleRef.Kind == "ClusterRole" && rulesAllow(r.clusterRoles[b.RoleRef.Name], q) {
			return true
		}
	}
	for _, b := range r.roleBindings {
		if !bound(b.Subjects) || q.namespace != b.Namespace {
			continue
		}
		rules := r.roles[b.Namespace+"/"+b.RoleRef.Name]
		if b.RoleRef.Kind == "ClusterRole" {
			rules = r.clusterRoles[b.RoleRef.Name]
		}
		if rulesAllow(rules, q) {
			return true
		}
	}
	return false
}

func rulesAllow(rules []rbacv1.PolicyRule, q request) bool {
	return slices.ContainsFunc(rules, func(rule rbacv1.PolicyRule) bool {
		return slices.Contains(rule.APIGroups, q.group) && slices.Contains(rule.Resources, q.resource) &&
			slices.Contains(rule.Verbs, q.verb) &&
			(len(rule.ResourceNames) == 0 || (q.name != "" && slices.Contains(rule.ResourceNames, q.name)))
	})
}

// TestRBACIsLeastPrivilege checks the shape of every rendered rule.
func TestRBACIsLeastPrivilege(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, render(t, c))
			type namedRules struct {
				kind, name string
				rules      []rbacv1.PolicyRule
			}
			var all []namedRules
			for _, r := range typedObjects[*rbacv1.ClusterRole](objs) {
				all = append(all, namedRules{"ClusterRole", r.Name, r.Rules})
			}
			for _, r := range typedObjects[*rbacv1.Role](objs) {
				all = append(all, namedRules{"Role", r.Namespace + "/" + r.Name, r.Rules})
			}
			secretRules := 0
			for _, r := range all {
				for _, rule := range r.rules {
					for _, field := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs, rule.ResourceNames, rule.NonResourceURLs} {
						if slices.Contains(field, "*") {
							t.Errorf("%s %s has a wildcard: %+v", r.kind, r.name, rule)
						}
					}
					if len(rule.ResourceNames) != 0 && slices.Contains(rule.Verbs, "create") {
						t.Errorf("%s %s restricts create by resourceNames, which never matches: %+v", r.kind, r.name, rule)
					}
					if slices.Contains(rule.Resources, "secrets") {
						secretRules++
						switch {
						case r.kind == "ClusterRole":
							t.Errorf("%s %s grants Secrets: %+v", r.kind, r.name, rule)
						case !c.selfManaged:
							t.Errorf("%s %s grants Secrets with cert-manager TLS: %+v", r.kind, r.name, rule)
						case !slices.Equal(rule.Verbs, []string{"create"}) && !slices.Equal(rule.ResourceNames, []string{c.fullname + "-webhook-tls"}):
							t.Errorf("%s %s grants Secrets other than %s-webhook-tls: %+v", r.kind, r.name, c.fullname, rule)
						}
					}
					if slices.Contains(rule.APIGroups, "openreports.io") {
						switch {
						case !c.openReports:
							t.Errorf("%s %s grants OpenReports with openReports.enabled=false: %+v", r.kind, r.name, rule)
						case !slices.Equal(rule.APIGroups, []string{"openreports.io"}) || !slices.Equal(rule.Resources, []string{"reports"}) ||
							!slices.Equal(rule.Verbs, []string{"list", "create", "update", "delete"}):
							t.Errorf("%s %s grants more than list/create/update/delete of reports.openreports.io: %+v", r.kind, r.name, rule)
						}
					}
					inProcessRead := c.inProcess && slices.Equal(rule.Resources, []string{"mutatingadmissionpolicies"}) &&
						slices.Equal(rule.Verbs, []string{"get"}) && slices.Equal(rule.ResourceNames, []string{c.fullname + "-inject"})
					// The pre-flight roles read the webhook configurations (TestPreflightRBAC).
					preflightRead := r.kind == "ClusterRole" && r.name == c.fullname+"-preflight" && readOnly(rule)
					if slices.Contains(rule.APIGroups, "admissionregistration.k8s.io") && !inProcessRead && !preflightRead {
						if !c.selfManaged || !slices.Equal(rule.ResourceNames, []string{c.fullname}) {
							t.Errorf("%s %s grants webhook configurations other than self-managed TLS's %q: %+v", r.kind, r.name, c.fullname, rule)
						}
					}
				}
			}
			if c.selfManaged && secretRules == 0 {
				t.Errorf("self-managed TLS, but no rule grants the TLS Secret")
			}
		})
	}
}

// TestRBACCoversTheBinary asks the rendered RBAC about the requests each component makes (from
// internal/webhookserver, internal/selftls, internal/audit and controller), and about some it
// must not be able to make.
func TestRBACCoversTheBinary(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, render(t, c))
			r := renderedRBAC(objs)
			accounts := map[string]string{} // component -> ServiceAccount
			for _, d := range typedObjects[*appsv1.Deployment](objs) {
				accounts[d.Labels["app.kubernetes.io/component"]] = d.Spec.Template.Spec.ServiceAccountName
			}
			check := func(component string, allowed bool, qs ...request) {
				t.Helper()
				sa, ok := accounts[component]
				if !ok {
					t.Fatalf("no %s Deployment", component)
				}
				for _, q := range qs {
					if got := r.allows(namespace, sa, q); got != allowed {
						t.Errorf("%s (%s) may %s: %v, want %v", component, sa, q, got, allowed)
					}
				}
			}
			verbs := func(group, resource, ns, name string, verbs ...string) []request {
				var out []request
				for _, v := range verbs {
					out = append(out, request{verb: v, group: group, resource: resource, namespace: ns, name: name})
				}
				return out
			}

			// The metrics server reviews each scraper's token and access (internal/serving).
			metricsAuth := slices.Concat(
				verbs("authentication.k8s.io", "tokenreviews", "", "", "create"),
				verbs("authorization.k8s.io", "subjectaccessreviews", "", "", "create"),
			)
			// Admission facts and the audit: cached cluster-wide.
			check("webhook", true, slices.Concat(
				verbs("", "nodes", "", "", "get", "list", "watch"),
				verbs("", "namespaces", "", "", "get", "list", "watch"),
				verbs("apps", "daemonsets", "", "", "list", "watch"),
				verbs("apps", "daemonsets", "default", "agent", "get"),
				verbs("events.k8s.io", "events", "default", "", "create", "patch"), // audit Events on DaemonSets
				// Policy ConfigMaps, the audit's leader election and PolicyRejected Events: own namespace.
				verbs("", "configmaps", namespace, "", "list", "watch"),
				// The policy error annotation on a rejected policy ConfigMap.
				verbs("", "configmaps", namespace, "team-policies", "patch"),
				verbs("coordination.k8s.io", "leases", namespace, "daemonguard-webhook", "get", "update"),
				verbs("coordination.k8s.io", "leases", namespace, "", "create"),
				verbs("", "events", namespace, "", "create", "patch"),
				verbs("events.k8s.io", "events", namespace, "", "create", "patch"),
				metricsAuth,
			)...)
			check("webhook", false, slices.Concat(
				verbs("", "configmaps", "default", "", "list", "get"),
				verbs("", "configmaps", "default", "team-policies", "patch"),
				verbs("", "configmaps", namespace, "team-policies", "update", "delete"),
				verbs("", "configmaps", namespace, "", "create"),
				verbs("", "secrets", "", "", "list", "watch"),
				verbs("", "secrets", "kube-system", "token", "get"),
				verbs("", "secrets", namespace, "other", "get", "update"),
				verbs("apps", "daemonsets", "default", "agent", "update", "patch", "delete"),
				verbs("", "pods", "default", "agent-x", "delete"),
				verbs("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "other", "get", "update"),
				verbs("admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "list"),
			)...)
			tls := slices.Concat(
				verbs("", "secrets", namespace, "", "create"),
				verbs("", "secrets", namespace, c.fullname+"-webhook-tls", "get", "list", "watch", "update"),
				verbs("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", c.fullname, "get", "list", "watch", "update"),
				verbs("admissionregistration.k8s.io", "validatingwebhookconfigurations", "", c.fullname, "get", "list", "watch", "update"),
			)
			check("webhook", c.selfManaged, tls...) // with cert-manager the webhook only reads files
			if c.selfManaged {                      // the CA bundle alone, for the ServiceMonitor (--tls-ca-configmap)
				check("webhook", true, verbs("", "configmaps", namespace, c.fullname+"-webhook-ca", "patch")...)
			}
			// In-process injection: the webhook reads its policy to report whether it is in sync.
			check("webhook", c.inProcess, verbs("admissionregistration.k8s.io", "mutatingadmissionpolicies", "", c.fullname+"-inject", "get")...)
			check("webhook", false, slices.Concat(
				verbs("admissionregistration.k8s.io", "mutatingadmissionpolicies", "", c.fullname+"-inject", "update", "patch", "delete"),
				verbs("admissionregistration.k8s.io", "mutatingadmissionpolicies", "", "other", "get"),
				verbs("admissionregistration.k8s.io", "mutatingadmissionpolicybindings", "", c.fullname+"-inject", "get"),
			)...)

			// The audit's OpenReports Reports (internal/audit.ReportWriter): one list per pass in all
			// namespaces, then writes of the Reports that changed. No reads of single Reports, no
			// watch, and nothing of other report kinds.
			check("webhook", c.openReports, slices.Concat(
				verbs("openreports.io", "reports", "", "", "list"),
				verbs("openreports.io", "reports", "default", "daemonguard", "create", "update", "delete"),
				verbs("openreports.io", "reports", "agents", "daemonguard-1", "create", "update", "delete"),
			)...)
			check("webhook", false, slices.Concat(
				verbs("openreports.io", "reports", "", "", "watch"),
				verbs("openreports.io", "reports", "default", "daemonguard", "get", "patch"),
				verbs("openreports.io", "clusterreports", "", "", "list", "create"),
				verbs("wgpolicyk8s.io", "policyreports", "default", "", "list", "create"),
			)...)

			if !c.controller {
				if _, ok := accounts["controller"]; ok {
					t.Fatalf("controller disabled, but a controller Deployment is rendered")
				}
				return
			}
			check("controller", true, slices.Concat(
				verbs("", "nodes", "", "", "get", "list", "watch"),
				verbs("coordination.k8s.io", "leases", namespace, "daemonguard-rollout-controller", "get", "update"),
				verbs("coordination.k8s.io", "leases", namespace, "", "create"),
				verbs("", "events", namespace, "", "create"), // leader election Events (core)
				metricsAuth,
			)...)
			check("controller", false, slices.Concat(
				verbs("", "secrets", namespace, c.fullname+"-webhook-tls", "get"),
				verbs("", "nodes", "", "node-1", "update", "patch", "delete"),
				verbs("", "configmaps", namespace, "", "list"),
				verbs("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", c.fullname, "update"),
				verbs("openreports.io", "reports", "", "", "list", "create"),
			)...)
			// The rollout's reads and writes (controller/rollout): in every namespace, or in each
			// of controller.namespaces and nothing outside them.
			rolledOut := c.controllerNamespaces
			if rolledOut == nil {
				rolledOut = []string{"default"}
			}
			for _, ns := range rolledOut {
				check("controller", true, slices.Concat(
					verbs("apps", "daemonsets", ns, "", "list", "watch"),
					verbs("apps", "daemonsets", ns, "agent", "get", "update", "patch"),
					verbs("apps", "daemonsets/status", ns, "agent", "update", "patch"),
					verbs("apps", "controllerrevisions", ns, "", "list", "watch"),
					verbs("", "pods", ns, "", "list", "watch"),
					verbs("", "pods", ns, "agent-x", "get", "delete"),
					verbs("events.k8s.io", "events", ns, "", "create", "patch"),
				)...)
				check("controller", false, slices.Concat(
					verbs("", "secrets", ns, "", "list", "get"),
					verbs("apps", "daemonsets", ns, "agent", "delete", "create"),
				)...)
			}
			if c.controllerNamespaces != nil {
				check("controller", false, slices.Concat(
					verbs("apps", "daemonsets", "", "", "list", "watch"),
					verbs("", "pods", "", "", "list", "watch"),
					verbs("apps", "controllerrevisions", "", "", "list"),
					verbs("apps", "daemonsets", "default", "agent", "get", "update"),
					verbs("", "pods", "default", "agent-x", "delete"),
					verbs("events.k8s.io", "events", "default", "", "create"),
				)...)
			}
		})
	}
}
