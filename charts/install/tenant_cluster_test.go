package install

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// tenant is a ServiceAccount bound to the built-in admin ClusterRole in its own namespace only,
// as namespace-as-a-service platforms hand namespaces out, and allowed to edit its own Namespace
// object (as some of them allow, for labels of their own).
type tenant struct {
	namespace  string
	kubeconfig string
	client     kubernetes.Interface
}

func newTenant(t *testing.T) *tenant {
	t.Helper()
	ctx := context.Background()
	ns := cluster.NewTenantNamespace(t)
	const sa = "tenant"
	if _, err := cluster.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}
	if _, err := cluster.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	own := ns + "-namespace-editor"
	if _, err := cluster.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: own},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, ResourceNames: []string{ns}, Verbs: []string{"get", "patch", "update"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: own},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: own},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), own, metav1.DeleteOptions{})
		_ = cluster.Client.RbacV1().ClusterRoles().Delete(context.Background(), own, metav1.DeleteOptions{})
	})
	kubeconfig, err := cluster.ServiceAccountKubeconfig(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &tenant{namespace: ns, kubeconfig: kubeconfig, client: client}
}

// kubectl runs kubectl as the tenant.
func (tn *tenant) kubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command("kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+tn.kubeconfig)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// wideAgent is agentDaemonSet labelled daemonguard.io/ignore=true with maxUnavailable 100%, which
// the rolling_update_budget policy denies.
func wideAgent(name string) *appsv1.DaemonSet {
	ds := agentDaemonSet(name)
	ds.Labels = map[string]string{admission.IgnoreLabel: "true"}
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("100%"))}}
	return ds
}

// probePolicy is a policy ConfigMap whose one policy warns about every DaemonSet: its warning
// tells that the webhook serves a set with it.
func probePolicy(namespace, name, pkg string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}},
		Data: map[string]string{pkg + ".rego": "package daemonguard.policies." + pkg + "\n\nenforcement := \"warn\"\n\n" +
			"violation contains {\"field\": \"metadata.name\", \"msg\": \"" + pkg + " is in force\"}\n"},
	}
}

// TestHostileTenantChangesNothing installs the chart and plays a tenant who wants more than an
// administrator granted: node-critical pods on the control plane, a DaemonSet that skips
// validation, its namespace marked for node agents, policies of its own. Each attempt must fail
// or change nothing, while the namespace an administrator marked still gets the injection.
func TestHostileTenantChangesNothing(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	tn := newTenant(t)
	// Stored before daemonguard is installed, as in a cluster that adopts it: the audit must
	// report it whatever its labels say.
	if _, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, wideAgent("stored-before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	r := installChart(t, "dg-tenancy")
	web := r.runWebhook(r.webhookPort, "--audit-interval=2s")
	// The administrator's namespace for node agents (NewTestNamespace would name it after the
	// test, as the tenant's).
	const agents = "dg-tenancy-agents"
	if err := cluster.CreateNamespace(ctx, agents); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Namespaces().Delete(context.Background(), agents, metav1.DeleteOptions{})
	})
	waitAdmission(t, agents)
	cluster.WaitFor(t, 2*time.Minute, "the API server calls the validating webhook", func(ctx context.Context) (bool, string) {
		_, err := cluster.Client.AppsV1().DaemonSets(agents).Create(ctx, wideAgent("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "rolling_update_budget"), fmt.Sprintf("dry-run create: %v", err)
	})

	t.Run("its DaemonSet gets no critical priority and no control-plane toleration", func(t *testing.T) {
		ds, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, agentDaemonSet("agent"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if spec := ds.Spec.Template.Spec; spec.PriorityClassName != "" || len(spec.Tolerations) != 0 {
			t.Errorf("the tenant's DaemonSet was stored with priorityClassName %q and tolerations %+v", spec.PriorityClassName, spec.Tolerations)
		}
		admin, err := dryRunDaemonSet(ctx, cluster.Client, agents, "agent")
		if err != nil {
			t.Fatal(err)
		}
		if admin.Spec.Template.Spec.PriorityClassName != "system-node-critical" || !hasToleration(admin.Spec.Template.Spec.Tolerations, "node-role.kubernetes.io/control-plane") {
			t.Errorf("the administrator's marked namespace lost the injection: %+v", admin.Spec.Template.Spec)
		}
	})

	t.Run("the ignore label does not switch validation off", func(t *testing.T) {
		_, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, wideAgent("wide"), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "rolling_update_budget") {
			t.Errorf("an ignore-labelled DaemonSet with maxUnavailable 100%%: err = %v, want a rolling_update_budget denial", err)
		}
		cluster.WaitFor(t, 2*time.Minute, "the audit reports the ignore-labelled DaemonSet stored before", func(ctx context.Context) (bool, string) {
			events, err := cluster.Client.EventsV1().Events(tn.namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			return reportsViolation(events.Items, "stored-before", "rolling_update_budget"), fmt.Sprintf("%d events, none a rolling_update_budget PolicyViolation of stored-before", len(events.Items))
		})
	})

	t.Run("it cannot mark its own namespace", func(t *testing.T) {
		for _, label := range []string{admission.NodeAgentsLabel + "=true", "daemonguard.io/class=system"} {
			out, err := tn.kubectl("", "label", "namespace", tn.namespace, label)
			if err == nil || !strings.Contains(out, "nodeAgents.labelGuard") {
				t.Errorf("kubectl label namespace %s %s as the tenant: err %v, want the label guard's refusal:\n%s", tn.namespace, label, err, out)
			}
		}
		ns, err := cluster.Client.CoreV1().Namespaces().Get(ctx, tn.namespace, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range ns.Labels {
			if strings.HasPrefix(k, admission.GuardedLabelPrefix) {
				t.Errorf("the tenant's namespace carries %s=%s", k, ns.Labels[k])
			}
		}
		// Its own labels outside daemonguard.io/ stay its own.
		if out, err := tn.kubectl("", "label", "namespace", tn.namespace, "team=blue"); err != nil {
			t.Errorf("the tenant may not set a label of its own: %v\n%s", err, out)
		}
	})

	t.Run("a policy ConfigMap in its own namespace changes nothing", func(t *testing.T) {
		disarm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "relaxed", Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}},
			Data:       map[string]string{"rolling_update_budget.rego": "package daemonguard.policies.rolling_update_budget\n"},
		}
		if _, err := tn.client.CoreV1().ConfigMaps(tn.namespace).Create(ctx, disarm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// An administrator's policy ConfigMap, created after the tenant's: once it is in force,
		// the webhook has read the policy ConfigMaps it follows since the tenant's was created.
		if _, err := cluster.Client.CoreV1().ConfigMaps(r.Namespace).Create(ctx, probePolicy(r.Namespace, "admin-probe", "admin_probe"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cluster.WaitFor(t, 2*time.Minute, "the administrator's policy is in force", func(context.Context) (bool, string) {
			return warned(tn, "admin_probe"), "no admin_probe warning yet"
		})
		_, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, wideAgent("still-wide"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil || !strings.Contains(err.Error(), "rolling_update_budget") {
			t.Errorf("after the tenant's policy ConfigMap: err = %v, want the rolling_update_budget denial", err)
		}
	})

	t.Run("metrics and /policy-status refuse it", func(t *testing.T) {
		token, err := harness.Token(ctx, cluster.Client, tn.namespace, "tenant")
		if err != nil {
			t.Fatal(err)
		}
		insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the answer is under test, not the certificate
		for _, path := range []string{serving.MetricsPath, webhookserver.PolicyStatusPath} {
			for who, c := range map[string]struct {
				token string
				want  int
			}{"without a token": {"", http.StatusUnauthorized}, "with the tenant's token": {token, http.StatusForbidden}} {
				code, body, err := harness.Scrape(ctx, "https://"+web.MetricsAddr+path, c.token, insecure)
				if err != nil || code != c.want {
					t.Errorf("GET %s %s: HTTP %d (%v), want %d:\n%.200s", path, who, code, err, c.want, body)
				}
			}
		}
	})

	t.Run("a policy calling http.send is rejected while the last good set serves", func(t *testing.T) {
		var received atomic.Int64
		listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { received.Add(1) }))
		defer listener.Close()
		leak := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "leak", Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}},
			Data: map[string]string{"leak.rego": "package daemonguard.policies.leak\n\n" +
				"violation contains {\"field\": \"metadata.name\", \"msg\": \"sent\"} if {\n" +
				"\thttp.send({\"method\": \"POST\", \"url\": \"" + listener.URL + "\", \"body\": input}).status_code == 200\n}\n"},
		}
		if _, err := cluster.Client.CoreV1().ConfigMaps(r.Namespace).Create(ctx, leak, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cluster.WaitFor(t, 2*time.Minute, "the policy error on the ConfigMap", func(ctx context.Context) (bool, string) {
			cm, err := cluster.Client.CoreV1().ConfigMaps(r.Namespace).Get(ctx, "leak", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			msg := cm.Annotations[admission.PolicyErrorAnnotation]
			return strings.Contains(msg, "leak.rego:") && strings.Contains(msg, "http.send"), fmt.Sprintf("annotation %q", msg)
		})
		if !warned(tn, "admin_probe") {
			t.Error("the last good set (with admin_probe) no longer serves")
		}
		if _, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, wideAgent("after-leak"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err == nil || !strings.Contains(err.Error(), "rolling_update_budget") {
			t.Errorf("with the rejected set: err = %v, want the rolling_update_budget denial", err)
		}
		if n := received.Load(); n != 0 {
			t.Errorf("the listener received %d requests from the policy", n)
		}
	})
}

// warned tells whether a server-side dry run of a DaemonSet in the tenant's namespace comes back
// with a warning of policy.
func warned(tn *tenant, policy string) bool {
	manifest := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: warn-probe}\nspec:\n  selector: {matchLabels: {app: p}}\n" +
		"  template:\n    metadata: {labels: {app: p}}\n    spec: {containers: [{name: p, image: p}]}\n"
	out, _ := tn.kubectl(manifest, "create", "--dry-run=server", "-n", tn.namespace, "-f", "-")
	return strings.Contains(out, "["+policy+"]")
}

// reportsViolation tells whether events hold the audit's PolicyViolation of policy on the
// DaemonSet name.
func reportsViolation(events []eventsv1.Event, name, policy string) bool {
	for _, e := range events {
		if e.Reason == "PolicyViolation" && e.Regarding.Kind == "DaemonSet" && e.Regarding.Name == name && strings.Contains(e.Note, policy) {
			return true
		}
	}
	return false
}
