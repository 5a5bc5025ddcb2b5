package realnode

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/nodeimages"
	"github.com/daemonguard/daemonguard/test/promtest"
)

// gatedName is the DaemonSet of the gated rollout: the node agent, on the real node only, so that
// every value the gate judges comes from a container the real kubelet runs.
const gatedName = "gated-agent"

// recordErrorsGate halts a wave on which a node's new pods fail more than a tenth of their
// records: the node agent's own counters, as Prometheus scraped them from the pod, of the new
// revision only (the revision label comes from the pod's controller-revision-hash). A 15s rate
// window holds a dozen samples at the 1s scrape interval; the first measurement comes 3s after
// the wave is up, and one before Prometheus has discovered the new pod and scraped it twice
// finds no sample, pausing the rollout (AnalysisInconclusive) until the next.
const recordErrorsGate = `- name: record-errors
  query: >-
    sum by (node) (rate(node_agent_record_errors_total{node=~"{{ nodes }}",revision="{{ revision }}"}[15s]))
    / sum by (node) (rate(node_agent_records_total{node=~"{{ nodes }}",revision="{{ revision }}"}[15s]))
  max: 0.1
  interval: 3s
  count: 2`

// gatedAgent is the node agent on the real node, managed with a budget of one node and the
// record-errors gate, failing errorRatio of its records (NODE_AGENT_ERROR_RATIO).
func gatedAgent(image, errorRatio string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %[1]s
  labels: {app: %[1]s}
  annotations:
    daemonguard.io/rollout: managed
    daemonguard.io/max-unavailable: "1"
    daemonguard.io/progress-deadline: "2m"
    daemonguard.io/analysis: |
      %[5]s
spec:
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      nodeSelector: {kubernetes.io/hostname: %[2]s}
      containers:
      - name: agent
        image: %[3]s
        imagePullPolicy: IfNotPresent
        env:
        - name: NODE_NAME
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        - name: NODE_AGENT_ERROR_RATIO
          value: %[4]q
        ports: [{name: http, containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /readyz, port: http}
          periodSeconds: 1
`, gatedName, realNode, image, errorRatio, strings.ReplaceAll(recordErrorsGate, "\n", "\n      "))
}

// agentScrapeConfig is how a user's Prometheus scrapes node agents (docs/rollouts.md, "Prometheus"):
// the pods of the DaemonSet, at their http port, with the pod's controller-revision-hash as
// `revision` and its node as `node`, the labels the gate's placeholders select on, and its
// namespace as `namespace`, the label the controller keeps the gate's query to. The agent
// labels its series with its node too; the target's label wins and the agent's is kept as
// exported_node.
var agentScrapeConfig = []promtest.RelabelConfig{
	{SourceLabels: []string{"__meta_kubernetes_pod_label_app"}, Regex: gatedName, Action: "keep"},
	{SourceLabels: []string{"__meta_kubernetes_pod_container_port_name"}, Regex: "http", Action: "keep"},
	{SourceLabels: []string{"__meta_kubernetes_pod_label_controller_revision_hash"}, TargetLabel: "revision"},
	{SourceLabels: []string{"__meta_kubernetes_pod_node_name"}, TargetLabel: "node"},
	{SourceLabels: []string{"__meta_kubernetes_pod_name"}, TargetLabel: "pod"},
	// The namespace a gate outside namespaces marked for node agents is kept to.
	{SourceLabels: []string{"__meta_kubernetes_namespace"}, TargetLabel: "namespace"},
}

// testGatedRollout rolls the node agent out on the real node under an analysis gate measured by
// a real Prometheus that scrapes the agent's pods at their pod IPs, found through the API server
// with a pod reader's identity (promtest.PodJob: the labels of Kubernetes discovery, served over
// HTTP discovery, since Debian's Prometheus lacks Kubernetes discovery); the chart's controller
// pod queries it. The first revision is not measured; v2,
// healthy, completes with the gate Passed; v2 failing half its records halts with AnalysisFailed,
// naming the real node and the error ratio its container reported.
func testGatedRollout(t *testing.T, in *installed) {
	ns := cluster.NewTestNamespace(t)
	reader, err := clientcmd.BuildConfigFromFlags("", podReaderKubeconfig(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	podReader, err := kubernetes.NewForConfig(reader)
	if err != nil {
		t.Fatal(err)
	}
	prom := promtest.Start(t, promtest.Options{
		// The controller pod reaches the host only at its address on the node's network.
		ListenHost: cluster.NodeHostIP(),
		PodJobs: []promtest.PodJob{{Job: "node-agents", Client: podReader,
			Namespaces: []string{ns}, RelabelConfigs: agentScrapeConfig}},
	})
	start := time.Now()
	in.upgrade(t, "--set", "controller.prometheus.address="+prom.Address(), "--wait", "--timeout", "3m")
	t.Cleanup(func() {
		// Back to the install's values, for the subtests that follow. They need no leader, so
		// the new pod's wait for the lease (up to the 26s retry period) is not waited for.
		in.upgrade(t, "--wait", "--timeout", "3m")
		waitController(t, "", false)
	})
	waitController(t, prom.Address(), true)
	t.Logf("helm upgrade --set controller.prometheus.address=%s: the new controller pod leads %s later", prom.Address(), since(start))

	clustertest.Kubectl(t, cluster, gatedAgent(nodeimages.AgentV1, "0"), "apply", "-n", ns, "-f", "-")
	v1 := waitGatedPod(t, ns, nodeimages.AgentV1, "0")
	ds := waitGated(t, ns, v1, "Complete, not measured", func(ds *appsv1.DaemonSet, status rolloutapi.Status) bool {
		return clustertest.RolloutCondition(ds, rolloutapi.PhaseComplete) != nil && status.Analysis != nil && status.Analysis.NothingReplaced
	})
	if m := clustertest.LastMeasurement(t, ds, "record-errors"); m != nil {
		t.Errorf("the first revision was measured: %+v", m)
	}
	// Prometheus found the pod through the API server and labelled its series as users do.
	sample := prom.WaitForSamples(t, fmt.Sprintf(`node_agent_records_total{job="node-agents",revision=%q,node=%q,pod=%q}`,
		v1.revision, realNode, v1.pod.Name), 1)[0]
	t.Logf("Prometheus scrapes the agent pod %s at %s:8080: %s", v1.pod.Name, v1.pod.Status.PodIP, sample.Metric)

	t.Run("a healthy release completes with the gate passed", func(t *testing.T) {
		start := time.Now()
		clustertest.Kubectl(t, cluster, gatedAgent(nodeimages.AgentV2, "0"), "apply", "-n", ns, "-f", "-")
		v2 := waitGatedPod(t, ns, nodeimages.AgentV2, "0")
		ds := waitGated(t, ns, v2, "Complete after its measurements", func(ds *appsv1.DaemonSet, _ rolloutapi.Status) bool {
			return clustertest.RolloutCondition(ds, rolloutapi.PhaseComplete) != nil
		})
		m := clustertest.LastMeasurement(t, ds, "record-errors")
		if m == nil || m.Result != rolloutapi.MeasurementPassed || !strings.Contains(m.Message, "1 nodes within bounds (max 0.1)") {
			t.Fatalf("the last measurement of record-errors is %+v, want Passed for the one node", m)
		}
		t.Logf("v2 complete %s after kubectl apply; record-errors %s at %s: %s", since(start), m.Result, m.At.Format(time.TimeOnly), m.Message)
	})

	t.Run("a release failing half its records halts naming the real node and its error ratio", func(t *testing.T) {
		start := time.Now()
		clustertest.Kubectl(t, cluster, gatedAgent(nodeimages.AgentV2, "0.5"), "apply", "-n", ns, "-f", "-")
		bad := waitGatedPod(t, ns, nodeimages.AgentV2, "0.5")
		ds := waitGated(t, ns, bad, "Failed", func(ds *appsv1.DaemonSet, status rolloutapi.Status) bool {
			return clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed) != nil && status.FailedRevision == bad.revision
		})
		failed := clustertest.RolloutCondition(ds, rolloutapi.PhaseFailed)
		t.Logf("Failed %s after kubectl apply: %s: %s", since(start), failed.Reason, failed.Message)
		if failed.Reason != rolloutapi.ReasonAnalysisFailed || !strings.Contains(failed.Message, "gate record-errors: 1 of 1 nodes out of bounds (max 0.1): "+realNode+"=") {
			t.Fatalf("Failed with %s: %s; want AnalysisFailed naming the gate and %s", failed.Reason, failed.Message, realNode)
		}
		match := regexp.MustCompile(regexp.QuoteMeta(realNode) + `=([0-9.e+-]+)`).FindStringSubmatch(failed.Message)
		if match == nil {
			t.Fatalf("no value for %s in %q", realNode, failed.Message)
		}
		judged, err := strconv.ParseFloat(match[1], 64)
		if err != nil || judged < 0.45 || judged > 0.55 {
			t.Errorf("the gate judged %s's error ratio %s, want about the 0.5 the container was configured with", realNode, match[1])
		}
		// What the gate judged is what the container counts: its own /metrics, read from the host.
		failedRecords, records := agentCounters(t, bad.pod)
		if ratio := failedRecords / records; ratio < 0.45 || ratio > 0.55 {
			t.Errorf("the agent container reports %v of %v records failed, want about half", failedRecords, records)
		}
		t.Logf("the container on %s counts %v failed of %v records; the gate judged %v", realNode, failedRecords, records, judged)
	})
}

// podReaderKubeconfig is the identity a user's Prometheus discovers pods with: a ServiceAccount
// allowed only to list and watch the pods of ns, its token and the API server's CA, in a
// kubeconfig file.
func podReaderKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	ctx := context.Background()
	const name = "prometheus"
	client := cluster.Client
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}}
	if _, err := client.RbacV1().RoleBindings(ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: cluster.RESTConfig.Host, CertificateAuthorityData: cluster.RESTConfig.CAData}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{name: {Token: token.Status.Token}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: name, Namespace: ns}},
		CurrentContext: "local",
	}
	path := filepath.Join(t.TempDir(), "prometheus.kubeconfig")
	if err := clientcmd.WriteToFile(kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitController waits until the one controller pod is Ready and runs with --prometheus-address
// set to address (without it when address is empty), and with lead until it holds the leader
// lease: the rollouts that follow are then reconciled by a controller that knows where
// Prometheus is.
func waitController(t *testing.T, address string, lead bool) {
	t.Helper()
	cluster.WaitFor(t, 3*time.Minute, fmt.Sprintf("the controller pod with --prometheus-address=%s (leading: %t)", address, lead), func(ctx context.Context) (bool, string) {
		pods, err := listPods(ctx, releaseNamespace, component("controller"))
		if err != nil {
			return false, err.Error()
		}
		var live []corev1.Pod
		for _, p := range pods {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		if len(live) != 1 || !clustertest.PodReady(&live[0]) {
			return false, fmt.Sprintf("%d controller pods not terminating, want one Ready", len(live))
		}
		got := ""
		for _, arg := range live[0].Spec.Containers[0].Args {
			if v, ok := strings.CutPrefix(arg, "--prometheus-address="); ok {
				got = v
			}
		}
		if got != address {
			return false, fmt.Sprintf("pod %s runs with --prometheus-address=%q", live[0].Name, got)
		}
		holder := leaseHolderOf(ctx)
		return !lead || strings.HasPrefix(holder, live[0].Name+"_"), "lease held by " + holder
	})
}

// gatedPod is the agent's pod on the real node and its revision (controller-revision-hash).
type gatedPod struct {
	pod      *corev1.Pod
	revision string
}

// waitGatedPod waits until the real node runs one Ready agent pod of image failing errorRatio of
// its records, and nothing else of the DaemonSet.
func waitGatedPod(t *testing.T, ns, image, errorRatio string) gatedPod {
	t.Helper()
	var found gatedPod
	cluster.WaitFor(t, 2*time.Minute, fmt.Sprintf("%s Ready on %s with %s and error ratio %s", gatedName, realNode, image, errorRatio), func(ctx context.Context) (bool, string) {
		pods, err := listPods(ctx, ns, "app="+gatedName)
		if err != nil {
			return false, err.Error()
		}
		if len(pods) != 1 {
			return false, fmt.Sprintf("%d pods", len(pods))
		}
		p := &pods[0]
		c := p.Spec.Containers[0]
		ratio := ""
		for _, e := range c.Env {
			if e.Name == "NODE_AGENT_ERROR_RATIO" {
				ratio = e.Value
			}
		}
		if p.Spec.NodeName != realNode || p.DeletionTimestamp != nil || c.Image != image || ratio != errorRatio || !clustertest.PodReady(p) {
			return false, fmt.Sprintf("pod %s on %q runs %s with error ratio %q, ready %t", p.Name, p.Spec.NodeName, c.Image, ratio, clustertest.PodReady(p))
		}
		found = gatedPod{pod: p, revision: p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]}
		return true, ""
	})
	return found
}

// waitGated waits until the rollout heads to pod's revision and done holds, and returns the
// DaemonSet.
func waitGated(t *testing.T, ns string, pod gatedPod, what string, done func(*appsv1.DaemonSet, rolloutapi.Status) bool) *appsv1.DaemonSet {
	t.Helper()
	return clustertest.WaitDaemonSet(t, cluster, ns, gatedName, 3*time.Minute, "revision "+pod.revision+" "+what, func(ds *appsv1.DaemonSet) (bool, string) {
		status, err := rolloutapi.DecodeStatus(ds.Annotations)
		if err != nil {
			return false, err.Error()
		}
		if status.Revision != pod.revision || ds.Status.ObservedGeneration != ds.Generation {
			return false, fmt.Sprintf("heading to revision %q", status.Revision)
		}
		return done(ds, status), fmt.Sprintf("conditions %+v, analysis %s", ds.Status.Conditions, ds.Annotations[rolloutapi.StatusAnalysis])
	})
}

// agentCounters reads the agent's failed and handled records from its /metrics at the pod's IP,
// as Prometheus does.
func agentCounters(t *testing.T, pod *corev1.Pod) (failed, records float64) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(pod.Status.PodIP, "8080") + "/metrics")
	if err != nil {
		t.Fatalf("the agent on %s: %v", realNode, err)
	}
	defer resp.Body.Close()
	values := map[string]float64{}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); len(f) == 2 {
			name, _, _ := strings.Cut(f[0], "{")
			values[name], _ = strconv.ParseFloat(f[1], 64)
		}
	}
	failed, records = values["node_agent_record_errors_total"], values["node_agent_records_total"]
	if records == 0 {
		t.Fatalf("the agent on %s answered /metrics with %s and no records: %v", realNode, resp.Status, values)
	}
	return failed, records
}
