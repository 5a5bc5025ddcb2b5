package install

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var reportsResource = schema.GroupVersionResource{Group: "openreports.io", Version: "v1alpha1", Resource: "reports"}

// The chart with openReports.enabled installs the Reports CRD and grants exactly what the audit
// needs: the binary, run with the chart's arguments under its ServiceAccount's token, writes the
// Report of a DaemonSet and deletes it when the DaemonSet goes. The CRD outlives the release.
func TestOpenReportsWithTheChart(t *testing.T) {
	ctx := context.Background()
	r := installChart(t, "dg-reports", "openReports.enabled=true", "webhook.auditInterval=1s")
	r.runWebhook(r.webhookPort)
	ns := cluster.NewTestNamespace(t)
	waitAdmission(t, ns)

	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}, // a warn policy objects
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}}},
			},
		},
	}
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reports := dynamic.NewForConfigOrDie(cluster.RESTConfig).Resource(reportsResource).Namespace(ns)
	cluster.WaitFor(t, 2*time.Minute, "the Report of the DaemonSet", func(ctx context.Context) (bool, string) {
		report, err := reports.Get(ctx, "daemonguard", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		results, _, _ := unstructured.NestedSlice(report.Object, "results")
		var seen []string
		for _, res := range results {
			m, _ := res.(map[string]any)
			seen = append(seen, fmt.Sprintf("%v %v", m["policy"], m["result"]))
		}
		joined := strings.Join(seen, ", ")
		return strings.Contains(joined, "on_delete_managed warn") && strings.Contains(joined, "inject pass"), joined
	})

	if err := cluster.Client.AppsV1().DaemonSets(ns).Delete(ctx, "agent", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "the Report deleted with the DaemonSet", func(ctx context.Context) (bool, string) {
		_, err := reports.Get(ctx, "daemonguard", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})

	r.helm("uninstall", r.Name, "--namespace", r.Namespace, "--wait")
	crds := dynamic.NewForConfigOrDie(cluster.RESTConfig).Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Get(ctx, "reports.openreports.io", metav1.GetOptions{}); err != nil {
		t.Errorf("the CRD after helm uninstall: %v, want it kept (helm.sh/resource-policy: keep)", err)
	}
	_ = crds.Delete(ctx, "reports.openreports.io", metav1.DeleteOptions{})
}
