package install

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// TestInProcessInjection installs the chart on the local kube-apiserver as it is (v1.37.2, or
// v1.33.13 with DAEMONGUARD_KUBERNETES_VERSION=1.33), and kubesupport, reading its discovery,
// decides which behaviour to hold: in-process injection where the server serves
// MutatingAdmissionPolicy v1, else the refusal of webhook.inProcessInjection=true and the
// DaemonSet mutating webhook under auto.
func TestInProcessInjection(t *testing.T) {
	localcluster.NeedCluster(t)
	server, err := kubesupport.Read(context.Background(), cluster.Client.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	if refusal := server.InProcessInjection(); refusal != nil {
		t.Logf("Kubernetes %s has no in-process injection: %v", server.Version, refusal)
		t.Run("true fails helm install and leaves nothing installed", func(t *testing.T) { testInProcessInjectionRefused(t, refusal) })
		t.Run("auto injects with the DaemonSet mutating webhook", testInProcessInjectionAutoWebhook)
		return
	}
	testInProcessInjectionServed(t)
}

// testInProcessInjectionServed installs the chart with its default webhook.inProcessInjection
// (auto) on a server that serves MutatingAdmissionPolicy v1 (1.36 and later): the API server
// injects with the rendered policy while no webhook replica runs (failurePolicy Ignore, so that
// the unreachable validating webhook lets the writes through), and a webhook replica, under the
// chart's own RBAC, reports in /policy-status whether the policy follows the policy set, and an
// Event when a policy ConfigMap changes the inject parameters.
func testInProcessInjectionServed(t *testing.T) {
	r := installChart(t, "dg-inproc", "webhook.failurePolicy=Ignore")
	policyName := r.object("MutatingAdmissionPolicy", "-inject").GetName()
	r.object("MutatingAdmissionPolicyBinding", "-inject")
	ctx := context.Background()
	m, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, r.webhookConfigurationName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Webhooks) != 1 || m.Webhooks[0].Name != "pods.mutate.daemonguard.io" {
		t.Fatalf("mutating webhooks %v, want only the Pod webhook", m.Webhooks)
	}

	waitInjected(t, cluster.NewTestNamespace(t), "the API server injects with no webhook running")

	web := r.runWebhook(r.webhookPort)
	token, verify := r.token(scraper), r.webhookMetricsTLS()
	status := func(ctx context.Context) (inSync bool, reason string, err error) {
		code, body, err := harness.Scrape(ctx, "https://"+web.MetricsAddr+webhookserver.PolicyStatusPath, token, verify)
		if err != nil {
			return false, "", err
		}
		if code != http.StatusOK {
			return false, "", fmt.Errorf("HTTP %d: %s", code, body)
		}
		var s struct {
			InProcessInjection *struct {
				Policy string `json:"policy"`
				InSync bool   `json:"inSync"`
				Reason string `json:"reason"`
			} `json:"inProcessInjection"`
		}
		if err := json.Unmarshal(body, &s); err != nil {
			return false, "", err
		}
		if s.InProcessInjection == nil || s.InProcessInjection.Policy != policyName {
			return false, "", fmt.Errorf("inProcessInjection %+v, want the status of %s", s.InProcessInjection, policyName)
		}
		return s.InProcessInjection.InSync, s.InProcessInjection.Reason, nil
	}
	cluster.WaitFor(t, time.Minute, "/policy-status says the policy is in sync", func(ctx context.Context) (bool, string) {
		inSync, reason, err := status(ctx)
		if err != nil {
			return false, err.Error()
		}
		return inSync, reason
	})

	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "inject-params", Namespace: r.Namespace, Labels: map[string]string{"daemonguard.io/policy": "true"}},
		Data:       map[string]string{"parameters.yaml": "inject: {priorityClassName: system-cluster-critical}\n"},
	}
	if _, err := cluster.Client.CoreV1().ConfigMaps(r.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "/policy-status says the policy no longer follows the parameters", func(ctx context.Context) (bool, string) {
		inSync, reason, err := status(ctx)
		if err != nil {
			return false, err.Error()
		}
		return !inSync && strings.Contains(reason, "other inject parameters"), reason
	})
	cluster.WaitFor(t, time.Minute, "an InProcessInjectionOutOfSync Event on the ConfigMap", func(ctx context.Context) (bool, string) {
		events, err := cluster.Client.EventsV1().Events(r.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range events.Items {
			if e.Reason == "InProcessInjectionOutOfSync" && e.Regarding.Name == cm.Name {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none about %s", len(events.Items), cm.Name)
	})
}

// testInProcessInjectionRefused: on a server without MutatingAdmissionPolicy v1,
// webhook.inProcessInjection=true fails helm install with the message the binary gives for the
// same server (refusal), before anything is applied: no release, no object of the chart, no
// MutatingAdmissionPolicy in any version the server serves.
func testInProcessInjectionRefused(t *testing.T, refusal error) {
	const name = "dg-inproc-true"
	r, out, err := tryInstallChart(t, name, "webhook.inProcessInjection=true")
	want := "webhook.inProcessInjection is true, but " + refusal.Error()
	if err == nil || !strings.Contains(out, want) {
		t.Fatalf("helm install: %v, want it to fail with %q:\n%s", err, want, out)
	}
	if out, err := r.Helm("list", "--all", "--short", "--namespace", r.Namespace); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("helm list after the refused install: %v\n%s", err, out)
	}
	if left := releaseObjects(t, r); len(left) > 0 {
		t.Errorf("the refused install left %v", left)
	}
}

// testInProcessInjectionAutoWebhook: on a server without MutatingAdmissionPolicy v1, auto (the
// default) registers the DaemonSet mutating webhook and renders no policy, and DaemonSets in a
// namespace marked for node agents get injected through the webhook.
func testInProcessInjectionAutoWebhook(t *testing.T) {
	r := installChart(t, "dg-inproc-auto")
	ctx := context.Background()
	m, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, r.webhookConfigurationName(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var webhooks []string
	for _, w := range m.Webhooks {
		webhooks = append(webhooks, w.Name)
	}
	if want := []string{"daemonsets.mutate.daemonguard.io", "pods.mutate.daemonguard.io"}; !slices.Equal(webhooks, want) {
		t.Errorf("mutating webhooks %q, want %q", webhooks, want)
	}
	for _, o := range r.Manifest(t) {
		if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") {
			t.Errorf("the release holds %s %s", o.GetKind(), o.GetName())
		}
	}
	for _, a := range r.Deployment(t, "webhook").Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--in-process-injection-policy") {
			t.Errorf("the webhook is told %s", a)
		}
	}
	// What releaseObjects finds of an installed release: the refused install's check that it
	// finds nothing is not blind.
	found := releaseObjects(t, r)
	for _, want := range []string{"mutatingwebhookconfigurations/" + m.Name, "deployments/" + r.Deployment(t, "webhook").Name} {
		if !slices.Contains(found, want) {
			t.Errorf("releaseObjects found %v, not %s", found, want)
		}
	}
	r.runWebhook(r.webhookPort)
	waitInjected(t, cluster.NewTestNamespace(t), "the DaemonSet mutating webhook injects")
}

// waitInjected waits until a server-side dry-run create of a DaemonSet in ns comes back with the
// built-in injection: the node-critical priority class and both control-plane tolerations.
func waitInjected(t *testing.T, ns, what string) {
	t.Helper()
	cluster.WaitFor(t, 2*time.Minute, what, func(ctx context.Context) (bool, string) {
		got, err := dryRunDaemonSet(ctx, cluster.Client, ns, "probe")
		if err != nil {
			return false, err.Error()
		}
		return got.Spec.Template.Spec.PriorityClassName == "system-node-critical" && len(got.Spec.Template.Spec.Tolerations) == 2,
			fmt.Sprintf("priorityClassName %q, tolerations %v", got.Spec.Template.Spec.PriorityClassName, got.Spec.Template.Spec.Tolerations)
	})
}

// releaseObjects lists what carries the release's app.kubernetes.io/instance label: the kinds of
// the chart's objects, and MutatingAdmissionPolicies and their bindings in
// every admissionregistration.k8s.io version the server serves them in.
func releaseObjects(t *testing.T, r *release) []string {
	t.Helper()
	ctx := context.Background()
	client, err := dynamic.NewForConfig(cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	resources := []schema.GroupVersionResource{
		{Version: "v1", Resource: "serviceaccounts"}, {Version: "v1", Resource: "services"},
		{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"},
		{Group: "apps", Version: "v1", Resource: "deployments"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
		{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
	}
	groups, err := cluster.Client.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name != "admissionregistration.k8s.io" {
			continue
		}
		for _, v := range g.Versions {
			list, err := cluster.Client.Discovery().ServerResourcesForGroupVersion(v.GroupVersion)
			if err != nil {
				t.Fatal(err)
			}
			for _, res := range list.APIResources {
				if res.Name == "mutatingadmissionpolicies" || res.Name == "mutatingadmissionpolicybindings" {
					resources = append(resources, schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: res.Name})
				}
			}
		}
	}
	selector := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + r.Name}
	var found []string
	for _, gvr := range resources {
		// Every namespace, and cluster-wide for the cluster-scoped kinds.
		list, err := client.Resource(gvr).List(ctx, selector)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatalf("list %s: %v", gvr, err)
		}
		for _, o := range list.Items {
			found = append(found, gvr.Resource+"/"+o.GetName())
		}
	}
	return found
}
