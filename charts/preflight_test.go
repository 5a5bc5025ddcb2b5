package charts

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// readOnly says a rule grants nothing but reads: get, list and watch.
func readOnly(rule rbacv1.PolicyRule) bool {
	return !slices.ContainsFunc(rule.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" })
}

// TestPreflightRBAC checks the pre-flight roles: read-only, and bound (preflight.subjects) they
// allow the requests `daemonguard rollout plan` makes (internal/preflight/gather.go) and nothing that
// writes or reads beyond them. The same roles, rendered by helm, run the plan against the local
// cluster in internal/preflight's TestPlanMatchesTheCluster.
func TestPreflightRBAC(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, render(t, c))
			r := renderedRBAC(objs)
			roleName := c.fullname + "-preflight"
			clusterRules, ok := r.clusterRoles[roleName]
			if !ok {
				t.Fatalf("no ClusterRole %s", roleName)
			}
			rules, ok := r.roles[namespace+"/"+roleName]
			if !ok {
				t.Fatalf("no Role %s in %s", roleName, namespace)
			}
			for _, rule := range slices.Concat(clusterRules, rules) {
				if !readOnly(rule) {
					t.Errorf("pre-flight rule %+v grants more than get, list and watch", rule)
				}
			}
			if c.preflightAccount == "" {
				for _, b := range r.clusterRoleBindings {
					if b.RoleRef.Name == roleName {
						t.Errorf("preflight.subjects is empty, but ClusterRoleBinding %s binds the pre-flight role", b.Name)
					}
				}
				for _, b := range r.roleBindings {
					if b.RoleRef.Name == roleName {
						t.Errorf("preflight.subjects is empty, but RoleBinding %s binds the pre-flight role", b.Name)
					}
				}
				return
			}
			saNamespace, saName, _ := strings.Cut(c.preflightAccount, "/")
			for _, q := range []request{
				{"list", "", "nodes", "", ""},
				{"list", "", "pods", "", ""},
				{"watch", "", "pods", "", ""},
				{"list", "scheduling.k8s.io", "priorityclasses", "", ""},
				{"list", "policy", "poddisruptionbudgets", "", ""},
				{"list", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", ""},
				{"list", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", ""},
				{"list", "", "configmaps", namespace, ""},
				{"get", "", "namespaces", "", "agents"},
				{"get", "apps", "daemonsets", "agents", "agent"},
			} {
				if !r.allows(saNamespace, saName, q) {
					t.Errorf("%s may not %s", c.preflightAccount, q)
				}
			}
			for _, q := range []request{
				{"watch", "", "nodes", "", ""},
				{"list", "", "configmaps", "default", ""},
				{"list", "", "secrets", "", ""},
				{"get", "", "secrets", namespace, c.fullname + "-webhook-tls"},
				{"create", "apps", "daemonsets", "agents", ""},
				{"update", "apps", "daemonsets", "agents", "agent"},
				{"patch", "apps", "daemonsets", "agents", "agent"},
				{"delete", "", "pods", "agents", "agent-x"},
				{"create", "", "pods/eviction", "agents", "agent-x"},
				{"update", "", "configmaps", namespace, "team-policies"},
				{"update", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", c.fullname},
				{"list", "apps", "controllerrevisions", "", ""},
			} {
				if r.allows(saNamespace, saName, q) {
					t.Errorf("%s may %s", c.preflightAccount, q)
				}
			}
		})
	}
}

// TestPreflightRBACCanBeLeftOut renders no pre-flight object with preflight.rbac.create=false.
func TestPreflightRBACCanBeLeftOut(t *testing.T) {
	out, err := template(t, "--set", "preflight.rbac.create=false", "--set-json", `preflight.subjects=[{"kind":"Group","name":"ci"}]`)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objects(t, out) {
		if strings.HasSuffix(o.Name, "-preflight") {
			t.Errorf("preflight.rbac.create=false, but %s %s is rendered", o.Kind, o.Name)
		}
	}
}
