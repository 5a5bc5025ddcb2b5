package install

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
)

// TestInProcessInjection installs the chart with its default webhook.inProcessInjection (auto) on
// the local kube-apiserver v1.36.3, which serves MutatingAdmissionPolicy v1: the API server injects
// with the rendered policy while no webhook replica runs (failurePolicy Ignore, so that the
// unreachable validating webhook lets the writes through), and a webhook replica, under the
// chart's own RBAC, reports in /policy-status whether the policy follows the policy set, and an
// Event when a policy ConfigMap changes the inject parameters.
func TestInProcessInjection(t *testing.T) {
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

	ns := cluster.NewTestNamespace(t)
	cluster.WaitFor(t, 2*time.Minute, "the API server injects with no webhook running", func(ctx context.Context) (bool, string) {
		got, err := dryRunDaemonSet(ctx, cluster.Client, ns, "probe")
		if err != nil {
			return false, err.Error()
		}
		return got.Spec.Template.Spec.PriorityClassName == "system-node-critical" && len(got.Spec.Template.Spec.Tolerations) == 2,
			fmt.Sprintf("priorityClassName %q, tolerations %v", got.Spec.Template.Spec.PriorityClassName, got.Spec.Template.Spec.Tolerations)
	})

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
