package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/promtest"
	"github.com/daemonguard/daemonguard/webhook"
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
	// The label guard is a ValidatingAdmissionPolicy, which the API server starts to enforce a
	// moment after helm created it (on 1.33 a tenant's first label got through in one run).
	cluster.WaitFor(t, 2*time.Minute, "the API server enforces the chart's label guard", func(context.Context) (bool, string) {
		out, err := clustertest.KubectlAs(cluster, tn.kubeconfig, "", "label", "namespace", tn.namespace, admission.NodeAgentsLabel+"=true", "--dry-run=server")
		return err != nil && strings.Contains(out, "nodeAgents.labelGuard"), fmt.Sprintf("a server-side dry run of the label as the tenant: %v: %s", err, out)
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

	t.Run("it cannot grant itself a critical priority or control-plane tolerations", func(t *testing.T) {
		for name, grant := range map[string]func(*corev1.PodSpec){
			"system-node-critical": func(s *corev1.PodSpec) { s.PriorityClassName = "system-node-critical" },
			"tolerate every taint": func(s *corev1.PodSpec) { s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}} },
			"tolerate the control plane": func(s *corev1.PodSpec) {
				s.Tolerations = []corev1.Toleration{{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			},
		} {
			ds := agentDaemonSet("self-granted")
			grant(&ds.Spec.Template.Spec)
			_, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, ds, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), "node_agent_grants") || !strings.Contains(err.Error(), admission.NodeAgentsLabel+"=true") {
				t.Errorf("%s by hand in an unmarked namespace: err = %v, want a node_agent_grants denial naming the mark", name, err)
			}
		}
		if _, err := tn.client.AppsV1().DaemonSets(tn.namespace).Get(ctx, "self-granted", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a self-granted DaemonSet was stored: get err = %v", err)
		}
		// The administrator's marked namespace keeps what the inject policy grants.
		admin := agentDaemonSet("granted")
		admin.Spec.Template.Spec.PriorityClassName = "system-node-critical"
		if _, err := cluster.Client.AppsV1().DaemonSets(agents).Create(ctx, admin, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("system-node-critical in the marked namespace: %v", err)
		}
	})

	t.Run("an oversized annotation costs the webhook nothing, through the API server or at its port", func(t *testing.T) {
		pid := web.Proc.PID()
		rss := clustertest.MemoryKiB(pid, "VmRSS")
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			t.Fatal(err) // the peak from now on, not of the process's life
		}
		ds := agentDaemonSet("commas")
		ds.Annotations = map[string]string{rolloutapi.AnnotationSteps: strings.Repeat(",", 20000)}
		_, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, ds, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), rolloutapi.AnnotationSteps) || len(err.Error()) > maxAnswerBytes {
			t.Errorf("20,000 commas through the API server: err = %.500v (%d bytes), want one denial naming the annotation", err, len(fmt.Sprint(err)))
		}
		// Straight to the port, as anyone on the pod network can: the largest annotation the
		// API server would let through, and the 61 KB review that once took 21 GB.
		for _, commas := range []int{60000, 255 << 10} {
			code, body := postReview(t, r.webhookPort, tn.namespace, strings.Repeat(",", commas))
			var review admissionv1.AdmissionReview
			if err := json.Unmarshal(body, &review); code != http.StatusOK || err != nil || review.Response == nil {
				t.Fatalf("%d commas at the port: HTTP %d (%v): %.300s", commas, code, err, body)
			}
			if review.Response.Allowed || len(body) > maxAnswerBytes || !strings.Contains(review.Response.Result.Message, rolloutapi.AnnotationSteps) {
				t.Errorf("%d commas at the port: allowed %v, %d bytes, want a denial naming the annotation under %d bytes: %.300s",
					commas, review.Response.Allowed, len(body), maxAnswerBytes, review.Response.Result.Message)
			}
		}
		if peak := clustertest.MemoryKiB(pid, "VmHWM"); peak-rss > maxReviewGrowthKiB {
			t.Errorf("the webhook's resident set peaked at %d MiB, %d MiB over its %d MiB before the reviews: want at most %d MiB more",
				peak>>10, (peak-rss)>>10, rss>>10, maxReviewGrowthKiB>>10)
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
			out, err := clustertest.KubectlAs(cluster, tn.kubeconfig, "", "label", "namespace", tn.namespace, label)
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
		if out, err := clustertest.KubectlAs(cluster, tn.kubeconfig, "", "label", "namespace", tn.namespace, "team=blue"); err != nil {
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

	t.Run("a gate reads its own namespace's series and nothing of another's", func(t *testing.T) {
		nodes, err := cluster.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// On every node, the payments team's secret without the label the gate names nodes by
		// (as in the issue: the error about it once quoted the series), and the tenant's own
		// series with it, out of the gate's bounds.
		var exposition strings.Builder
		for _, n := range nodes.Items {
			fmt.Fprintf(&exposition, "payments_secret_info{namespace=%q,node=%q,secret=%q} 1\n", "payments", n.Name, gateSecret)
			fmt.Fprintf(&exposition, "payments_secret_info{namespace=%q,zz=%q} 1\n", tn.namespace, n.Name)
		}
		exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, exposition.String())
		}))
		defer exporter.Close()
		prom := promtest.Start(t, promtest.Options{
			Targets:  []promtest.Target{{Job: "tenants", URL: exporter.URL + "/metrics", HonorLabels: true}},
			QueryLog: true,
		})
		// Waited for without naming the series, so that every query of them in the query log is
		// the controller's.
		prom.WaitForSamples(t, fmt.Sprintf(`scrape_samples_scraped{job="tenants"} >= %d`, 2*len(nodes.Items)), 1)
		r.runComponent("controller", "--prometheus-address="+prom.Address())

		gated := agentDaemonSet("gated")
		gated.Annotations = map[string]string{
			rolloutapi.AnnotationRollout:  rolloutapi.RolloutManaged,
			rolloutapi.AnnotationAnalysis: "- {name: secrets, query: 'payments_secret_info # {{ nodes }}', nodeLabel: zz, max: 0, interval: 1s, count: 1}",
		}
		gated.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		if _, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, gated, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		clustertest.WaitDaemonSet(t, cluster, tn.namespace, "gated", 2*time.Minute, "gated's pods available", func(ds *appsv1.DaemonSet) (bool, string) {
			st := ds.Status
			return st.ObservedGeneration == ds.Generation && st.DesiredNumberScheduled > 0 && st.NumberAvailable == st.DesiredNumberScheduled, fmt.Sprintf("%+v", st)
		})
		patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"agent:2"}]}}}}`)
		if _, err := tn.client.AppsV1().DaemonSets(tn.namespace).Patch(ctx, "gated", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}

		// Every look, from the template's change until the halt's Event, reads the DaemonSet's
		// annotations and conditions and the namespace's Events for the secret.
		var leak string
		look := func(ctx context.Context) (*appsv1.DaemonSet, []eventsv1.Event, error) {
			ds, err := cluster.Client.AppsV1().DaemonSets(tn.namespace).Get(ctx, "gated", metav1.GetOptions{})
			if err != nil {
				return nil, nil, err
			}
			events, err := cluster.Client.EventsV1().Events(tn.namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, nil, err
			}
			seen, err := json.Marshal(struct {
				Annotations map[string]string
				Conditions  []appsv1.DaemonSetCondition
				Events      []eventsv1.Event
			}{ds.Annotations, ds.Status.Conditions, events.Items})
			if err != nil {
				return nil, nil, err
			}
			if i := strings.Index(string(seen), gateSecret); i >= 0 && leak == "" {
				leak = string(seen[max(0, i-300):min(len(seen), i+100)])
			}
			return ds, events.Items, nil
		}
		var measured *rolloutapi.GateMeasurement
		cluster.WaitFor(t, 2*time.Minute, "the gate measured", func(ctx context.Context) (bool, string) {
			ds, _, err := look(ctx)
			if err != nil {
				return false, err.Error()
			}
			measured = clustertest.LastMeasurement(t, ds, "secrets")
			return measured != nil || leak != "", fmt.Sprintf("not measured yet: annotations %v, conditions %+v", ds.Annotations, ds.Status.Conditions)
		})
		// Only the tenant's own series, each 1 > max 0, come back: the gate fails naming its nodes.
		// (The payments series, without the zz label, would make it inconclusive.)
		if measured != nil && (measured.Result != rolloutapi.MeasurementFailed || !strings.Contains(measured.Message, "=1")) {
			t.Errorf("the gate's measurement %+v, want Failed on the tenant's own series' values", measured)
		} else if measured != nil {
			t.Logf("measured: %s: %s", measured.Result, measured.Message)
			cluster.WaitFor(t, time.Minute, "the halt's Event", func(ctx context.Context) (bool, string) {
				_, events, err := look(ctx)
				if err != nil {
					return false, err.Error()
				}
				for _, e := range events {
					if e.Regarding.Name == "gated" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, "secrets") {
						return true, ""
					}
				}
				return leak != "", fmt.Sprintf("%d Events, no Warning of gated naming the gate", len(events))
			})
		}
		if leak != "" {
			t.Errorf("the secret %q reached what the tenant reads: ...%s...", gateSecret, leak)
		}

		logged, err := prom.QueryLog()
		if err != nil {
			t.Fatal(err)
		}
		var asked, unscoped []string
		for _, q := range logged {
			if q.Path != "/api/v1/query" || !strings.Contains(q.Query, "payments_secret_info") {
				continue
			}
			asked = append(asked, q.Query)
			if !strings.Contains(q.Query, `namespace="`+tn.namespace+`"`) || strings.Contains(q.Query, `"payments"`) {
				unscoped = append(unscoped, q.Query)
			}
		}
		switch {
		case len(asked) == 0:
			t.Errorf("Prometheus' query log holds no query of the gate: %+v", logged)
		case len(unscoped) > 0:
			t.Errorf("Prometheus received %d of the gate's %d queries not kept to namespace=%q, e.g. %q", len(unscoped), len(asked), tn.namespace, unscoped[0])
		default:
			t.Logf("Prometheus received the gate's query %d times as %q", len(asked), asked[0])
		}

		t.Run("a gate without data pauses its rollout where the tenant sees it, with one Event", func(t *testing.T) {
			watchMissingSeries(t, tn, nodes.Items)
		})
	})
}

// watchMissingSeries has the tenant roll out a managed DaemonSet whose gate has no series at all,
// and looks at it once a second, as a user polling `kubectl get` would: from the first
// measurement on, every look shows Paused/AnalysisInconclusive naming a node of the wave, never
// Progressing, while the controller measures again (doubling its wait from the gate's 1 s); the
// pause has one RolloutPaused Event and no RolloutProgressing one.
func watchMissingSeries(t *testing.T, tn *tenant, nodes []corev1.Node) {
	ctx := t.Context()
	const name = "unmeasured"
	ds := agentDaemonSet(name)
	ds.Annotations = map[string]string{
		rolloutapi.AnnotationRollout:  rolloutapi.RolloutManaged,
		rolloutapi.AnnotationAnalysis: `- {name: missing, query: 'tenant_missing_total{zz=~"{{ nodes }}"}', nodeLabel: zz, max: 0, interval: 1s, count: 1}`,
	}
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	if _, err := tn.client.AppsV1().DaemonSets(tn.namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.WaitDaemonSet(t, cluster, tn.namespace, name, 2*time.Minute, name+"'s pods available", func(ds *appsv1.DaemonSet) (bool, string) {
		st := ds.Status
		return st.ObservedGeneration == ds.Generation && st.DesiredNumberScheduled > 0 && st.NumberAvailable == st.DesiredNumberScheduled, fmt.Sprintf("%+v", st)
	})
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"agent:2"}]}}}}`)
	if _, err := tn.client.AppsV1().DaemonSets(tn.namespace).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pausedFor := func(ds *appsv1.DaemonSet) (string, bool) {
		c := rolloutplan.ActiveCondition(ds.Status.Conditions)
		if c == nil || c.Type != rolloutapi.ConditionPaused || c.Reason != rolloutapi.ReasonAnalysisInconclusive {
			return fmt.Sprintf("%+v", c), false
		}
		for _, n := range nodes {
			if strings.Contains(c.Message, n.Name) {
				return c.Message, true
			}
		}
		return c.Message + " (names no node)", false
	}
	ds = clustertest.WaitDaemonSet(t, cluster, tn.namespace, name, 2*time.Minute, "paused for the missing series", func(ds *appsv1.DaemonSet) (bool, string) {
		msg, ok := pausedFor(ds)
		return ok, msg
	})
	pausedAt := clustertest.RolloutCondition(ds, rolloutapi.PhasePaused).LastTransitionTime.Time
	var measured []time.Time
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		ds, err := cluster.Client.AppsV1().DaemonSets(tn.namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if msg, ok := pausedFor(ds); !ok {
			t.Fatalf("a look during the pause showed %s, want Paused/AnalysisInconclusive naming a node", msg)
		}
		if m := clustertest.LastMeasurement(t, ds, "missing"); m != nil && m.Result == rolloutapi.MeasurementInconclusive &&
			(len(measured) == 0 || m.At.After(measured[len(measured)-1])) {
			measured = append(measured, m.At)
		}
	}
	if len(measured) < 2 {
		t.Errorf("%d inconclusive measurements seen in 8 s of the pause (%v), want the controller to measure again", len(measured), measured)
	}
	events, err := cluster.Client.EventsV1().Events(tn.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The condition's time is whole seconds: the pause's own Event is at most a second before it,
	// and the Progressing Event of the rollout's start may be within that second too.
	since := map[string]time.Time{rolloutapi.EventPaused: pausedAt.Add(-time.Second), rolloutapi.EventProgressing: pausedAt.Add(time.Second)}
	count := map[string]int{}
	for _, e := range events.Items {
		from, ok := since[e.Reason]
		switch {
		case e.Regarding.Name != name || !ok:
		case e.Series != nil && e.Series.LastObservedTime.After(from):
			count[e.Reason] += int(e.Series.Count)
		case e.EventTime.After(from):
			count[e.Reason]++
		}
	}
	if count[rolloutapi.EventPaused] != 1 || count[rolloutapi.EventProgressing] != 0 {
		t.Errorf("rollout Events of %s since the pause: %v, want one %s and no %s", name, count, rolloutapi.EventPaused, rolloutapi.EventProgressing)
	}
}

// gateSecret is the secret label of another namespace's series that a tenant's gate tries to read.
const gateSecret = "db-password-x7f3"

// maxAnswerBytes bounds an answer to any review (admission.Verdict's messages are capped), and
// maxReviewGrowthKiB what oversized reviews may add to the webhook's resident set: the review's
// body and its decoding, not an evaluation (docs/performance.md, "Review size").
const (
	maxAnswerBytes     = 64 << 10
	maxReviewGrowthKiB = 64 << 10
)

// postReview sends a validating AdmissionReview of a DaemonSet in namespace with the steps
// annotation steps straight to the webhook's port, as a client on the pod network can, and returns
// the HTTP status and body.
func postReview(t *testing.T, port int, namespace, steps string) (int, []byte) {
	t.Helper()
	ds := agentDaemonSet("at-the-port")
	ds.Namespace = namespace
	ds.Annotations = map[string]string{rolloutapi.AnnotationSteps: steps}
	ds.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
	object, err := json.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "0d5e4f6a-0000-4000-8000-000000000001", Operation: admissionv1.Create, Namespace: namespace, Name: ds.Name,
			Kind:     metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"},
			Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"},
			Object:   runtime.RawExtension{Raw: object},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a client of the pod network, not the API server
	}}
	resp, err := client.Post("https://127.0.0.1:"+strconv.Itoa(port)+webhook.ValidateDaemonSetPath, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, answer
}

// warned tells whether a server-side dry run of a DaemonSet in the tenant's namespace comes back
// with a warning of policy.
func warned(tn *tenant, policy string) bool {
	manifest := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: warn-probe}\nspec:\n  selector: {matchLabels: {app: p}}\n" +
		"  template:\n    metadata: {labels: {app: p}}\n    spec: {containers: [{name: p, image: p}]}\n"
	out, _ := clustertest.KubectlAs(cluster, tn.kubeconfig, manifest, "create", "--dry-run=server", "-n", tn.namespace, "-f", "-")
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
