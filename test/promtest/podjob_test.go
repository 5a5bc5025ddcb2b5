package promtest

import (
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// ListenHost moves Prometheus off 127.0.0.1: it answers at the address asked for.
func TestListenHost(t *testing.T) {
	s := Start(t, Options{ListenHost: "127.0.0.2"})
	if !strings.HasPrefix(s.Address(), "http://127.0.0.2:") {
		t.Errorf("Address() = %s, want the ListenHost 127.0.0.2", s.Address())
	}
	if _, err := s.Query(t.Context(), "up"); err != nil {
		t.Errorf("Prometheus at %s: %v", s.Address(), err)
	}
}

// A pod job scrapes a pod at podIP:port, with the labels Kubernetes discovery gives it turned
// into target labels by the job's relabel_configs, and skips pods a keep rule does not select.
func TestPodJob(t *testing.T) {
	registry := prometheus.NewRegistry()
	answer := prometheus.NewGauge(prometheus.GaugeOpts{Name: "promtest_agent_answer", Help: "A value the test sets."})
	registry.MustRegister(answer)
	answer.Set(7)
	exporter := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	t.Cleanup(exporter.Close)
	host, port, err := net.SplitHostPort(exporter.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	portNumber, _ := strconv.Atoi(port)
	pod := func(name, app string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns1",
				Labels: map[string]string{"app": app, "controller-revision-hash": "abc123"}},
			Spec: corev1.PodSpec{NodeName: "worker-1", Containers: []corev1.Container{{Name: "agent",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(portNumber)}}}}},
			Status: corev1.PodStatus{PodIP: host},
		}
	}
	client := fake.NewClientset(pod("agent-x", "agent"), pod("other-y", "other"))
	relabel := []RelabelConfig{
		{SourceLabels: []string{"__meta_kubernetes_pod_label_app"}, Regex: "agent", Action: "keep"},
		{SourceLabels: []string{"__meta_kubernetes_pod_label_controller_revision_hash"}, TargetLabel: "revision"},
		{SourceLabels: []string{"__meta_kubernetes_pod_node_name"}, TargetLabel: "node"},
		{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
	}
	s := Start(t, Options{PodJobs: []PodJob{{Job: "agents", Client: client, Namespaces: []string{"ns1"}, RelabelConfigs: relabel}}})
	waitForValue(t.Context(), t, s, `promtest_agent_answer{job="agents",revision="abc123",node="worker-1",pod="agent-x"}`, 7)
	targets, err := s.API().Targets(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(targets.Active) != 1 || string(targets.Active[0].Labels["pod"]) != "agent-x" {
		t.Errorf("active targets %+v, want only the pod agent-x that the keep rule selects", targets.Active)
	}
}

// podTargets makes a target per declared port of a pod with an IP, labelled as Kubernetes
// discovery labels it (label names sanitised), and none of a pod without an IP.
func TestPodTargets(t *testing.T) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "agent-x", Namespace: "ns1", Labels: map[string]string{"app.kubernetes.io/name": "agent"}},
		Spec: corev1.PodSpec{NodeName: "worker-1", Containers: []corev1.Container{{Name: "agent", Ports: []corev1.ContainerPort{
			{Name: "http", ContainerPort: 8080}, {Name: "grpc", ContainerPort: 9090}}}}},
		Status: corev1.PodStatus{PodIP: "10.0.0.7", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	groups := podTargets(p)
	if len(groups) != 2 || groups[0].Targets[0] != "10.0.0.7:8080" || groups[1].Targets[0] != "10.0.0.7:9090" {
		t.Fatalf("targets %+v, want 10.0.0.7:8080 and 10.0.0.7:9090", groups)
	}
	want := map[string]string{
		"__meta_kubernetes_pod_label_app_kubernetes_io_name":        "agent",
		"__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name": "true",
		"__meta_kubernetes_pod_container_port_name":                 "http",
		"__meta_kubernetes_pod_container_port_number":               "8080",
		"__meta_kubernetes_pod_node_name":                           "worker-1",
		"__meta_kubernetes_pod_ready":                               "true",
		"__meta_kubernetes_namespace":                               "ns1",
	}
	for k, v := range want {
		if got := groups[0].Labels[k]; got != v {
			t.Errorf("label %s = %q, want %q", k, got, v)
		}
	}
	p.Status.PodIP = ""
	if groups := podTargets(p); len(groups) != 0 {
		t.Errorf("a pod without an IP has targets %+v, want none", groups)
	}
}
