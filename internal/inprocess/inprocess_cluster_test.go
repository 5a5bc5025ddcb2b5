package inprocess_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/inprocess"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// testParameters put namespaces in every kind of class: by name, by labels, a class with its own
// tolerations (one with tolerationSeconds, one Equal) and priority class, one without priority
// class and with a label exclusion, one with injection off, and an excluded namespace.
const testParameters = `
namespaceClasses:
- name: system
  namespaces: [kube-system]
  matchLabels: {}
- name: critical
  namespaces: [dg-critical]
- name: agents
  matchLabels: {daemonguard-test/tier: agents}
- name: disabled
  namespaces: [dg-disabled]
inject:
  excludedNamespaces: [dg-excluded]
  namespaceClasses:
    critical:
      priorityClassName: system-cluster-critical
      tolerations:
      - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 600}
      - {key: dedicated, operator: Equal, value: agents, effect: NoSchedule}
      - {key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}
    agents:
      priorityClassName: ""
      excludedLabels: {daemonguard-test/skip: "yes"}
    disabled:
      enabled: false
`

// testNamespaces are the namespaces the manifests are admitted in, with their labels.
var testNamespaces = map[string]map[string]string{
	"dg-default":  localcluster.NodeAgentLabels,
	"dg-critical": localcluster.NodeAgentLabels,
	"dg-agents":   {"daemonguard-test/tier": "agents", admission.NodeAgentsLabel: "true"},
	"dg-disabled": localcluster.NodeAgentLabels,
	"dg-excluded": localcluster.NodeAgentLabels,
	// Not marked for node agents: neither the webhook nor the policy injects.
	"dg-tenant": nil,
}

const policyName = "daemonguard-inject-test"

// TestDifferentialWebhookVersusPolicy admits every DaemonSet manifest under testdata, and variants
// of the seed, in every test namespace: once through the webhook (run by test/harness with the
// test parameters from a policy ConfigMap, validation unregistered so denied manifests are stored
// too), once through the policy generated from the same parameters (webhook unregistered). The
// templates the API server would store must be identical. Real writes check that re-applying is
// a no-op (same generation), that a status-only update of a template without the injection
// leaves it alone, and that an ordinary update injects.
func TestDifferentialWebhookVersusPolicy(t *testing.T) {
	needInProcessInjection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for ns, labels := range testNamespaces {
		createNamespace(t, ctx, ns, labels)
	}
	cases := manifests(t)

	// Through the webhook.
	legacy := createUninjected(t, ctx, "legacy-webhook")
	w, err := harness.StartWebhook(ctx, cluster, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stopWebhook := func() {
		if !stopped {
			stopped = true
			w.Stop()
		}
	}
	defer stopWebhook()
	// Validation would reject the manifests under testdata/policies/denied before they are stored.
	if err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "daemonguard", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "inprocess-test", Namespace: harness.WebhookNamespace, Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}},
		Data:       map[string]string{"parameters.yaml": testParameters},
	}
	if _, err := cluster.Client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer cluster.Client.CoreV1().ConfigMaps(cm.Namespace).Delete(context.Background(), cm.Name, metav1.DeleteOptions{})
	waitPriorityClass(t, ctx, "dg-critical", "system-cluster-critical") // the webhook reloaded the parameters
	byWebhook := admitAll(t, ctx, cases)
	writesByWebhook := writes(t, ctx, "webhook", legacy)
	stopWebhook()

	// Through the generated policy.
	legacy = createUninjected(t, ctx, "legacy-policy")
	register(t, ctx, generate(t, policy.Source{Name: "configmap/inprocess-test", Files: cm.Data}))
	waitPriorityClass(t, ctx, "dg-critical", "system-cluster-critical")
	byPolicy := admitAll(t, ctx, cases)
	writesByPolicy := writes(t, ctx, "policy", legacy)

	injected := 0
	for _, k := range sortedKeys(byWebhook) {
		if byWebhook[k].injected {
			injected++
			if strings.HasPrefix(k, "dg-tenant: ") {
				t.Errorf("%s: injected in a namespace not marked for node agents", k)
			}
		}
		if byWebhook[k].template != byPolicy[k].template {
			t.Errorf("%s: stored templates differ\nwebhook: %s\npolicy:  %s", k, byWebhook[k].template, byPolicy[k].template)
		}
	}
	// Guard against a comparison of two admissions that both did nothing (or both everything).
	if injected == 0 || injected == len(byWebhook) {
		t.Errorf("the webhook changed %d of %d templates; the cases must include both", injected, len(byWebhook))
	}
	t.Logf("%d admissions compared (%d manifests x %d namespaces), %d injected", len(byWebhook), len(cases), len(testNamespaces), injected)
	// What each write must do; then the policy must do exactly what the webhook did.
	expect := map[string]string{
		"server-side apply creates":                                "generation +1",
		"the same apply again":                                     "generation +0",
		"an update with the stored object":                         "generation +0",
		"a status-only update of a template without the injection": "generation +0, tolerations [{\"key\":\"node-role.kubernetes.io/master\",\"effect\":\"NoSchedule\"}], priorityClassName \"\"",
		"an ordinary update of a template without the injection":   "generation +1",
	}
	for _, k := range sortedKeys(writesByWebhook) {
		if !strings.HasPrefix(writesByWebhook[k], expect[k]) {
			t.Errorf("%s through the webhook: %s, want %s", k, writesByWebhook[k], expect[k])
		}
		if writesByWebhook[k] != writesByPolicy[k] {
			t.Errorf("%s: webhook %s, policy %s", k, writesByWebhook[k], writesByPolicy[k])
		}
	}
}

// TestSeedLandsOnControlPlaneWithoutWebhook applies the demo's seed DaemonSet with the policy
// generated from the built-in parameters registered and no daemonguard webhook at all: it still
// runs on all five nodes, the tainted control-plane node included.
func TestSeedLandsOnControlPlaneWithoutWebhook(t *testing.T) {
	needInProcessInjection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	register(t, ctx, generate(t))
	createNamespace(t, ctx, "dg-seed", localcluster.NodeAgentLabels)
	waitPriorityClass(t, ctx, "dg-seed", "system-node-critical")
	if hooks, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); err != nil || len(hooks.Items) != 0 {
		t.Fatalf("mutating webhook configurations registered: %v (err %v)", hooks, err)
	}
	clustertest.Kubectl(t, cluster, "", "apply", "-n", "dg-seed", "-f", clustertest.SeedManifest(t))
	var nodes []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cluster.Client.CoreV1().Pods("dg-seed").List(ctx, metav1.ListOptions{LabelSelector: "app=nginx-ds"})
		if err != nil {
			return false, nil
		}
		nodes = nodes[:0]
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning {
				nodes = append(nodes, p.Spec.NodeName)
			}
		}
		return len(nodes) == 5, nil
	})
	sort.Strings(nodes)
	if err != nil {
		t.Fatalf("the seed runs on %v, want 5 nodes: %v", nodes, err)
	}
	if !strings.Contains(strings.Join(nodes, ","), "control-plane-0") {
		t.Fatalf("the seed runs on %v, not on the control-plane node", nodes)
	}
	ds, err := cluster.Client.AppsV1().DaemonSets("dg-seed").Get(ctx, "nginx-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("template priorityClassName %q, want system-node-critical", ds.Spec.Template.Spec.PriorityClassName)
	}
	t.Logf("seed pods on %v", nodes)
}

// generate returns the policy and binding generated from the built-ins overlaid with sources, as
// the webhook's reloader overlays its ConfigMaps.
func generate(t *testing.T, sources ...policy.Source) *inprocess.Objects {
	t.Helper()
	modules, params, err := policy.OverBuiltin(sources)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := inprocess.Generate(context.Background(), modules, params, inprocess.Options{Name: policyName, Namespace: harness.WebhookNamespace})
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func createNamespace(t *testing.T, ctx context.Context, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// register creates the policy and binding, removed again when the test ends (and waited for, so
// later tests see no injection).
func register(t *testing.T, ctx context.Context, objs *inprocess.Objects) {
	t.Helper()
	unregister := registerPolicy(t, ctx, objs)
	t.Cleanup(func() {
		unregister()
		createNamespace(t, context.Background(), "dg-default", localcluster.NodeAgentLabels)
		waitPriorityClass(t, context.Background(), "dg-default", "")
	})
}

// registerPolicy creates the policy and binding and returns what deletes them.
func registerPolicy(t *testing.T, ctx context.Context, objs *inprocess.Objects) func() {
	t.Helper()
	adm := cluster.Client.AdmissionregistrationV1()
	if _, err := adm.MutatingAdmissionPolicies().Create(ctx, objs.Policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.MutatingAdmissionPolicyBindings().Create(ctx, objs.Binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() {
		ctx := context.Background()
		_ = adm.MutatingAdmissionPolicyBindings().Delete(ctx, objs.Binding.Name, metav1.DeleteOptions{})
		_ = adm.MutatingAdmissionPolicies().Delete(ctx, objs.Policy.Name, metav1.DeleteOptions{})
	}
}

// waitPriorityClass waits until a dry-run create of a DaemonSet in ns gets priority class want
// (the API server loads webhook configurations and policies asynchronously).
func waitPriorityClass(t *testing.T, ctx context.Context, ns, want string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, seed(t, "probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			got = err.Error()
			return false, nil
		}
		got = ds.Spec.Template.Spec.PriorityClassName
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: priority class %q, want %q: %v", ns, got, want, err)
	}
}

func seed(t *testing.T, name string) *appsv1.DaemonSet {
	t.Helper()
	ds := clustertest.SeedObject(t)
	ds.Name, ds.Namespace = name, ""
	return ds
}

// manifest is one DaemonSet to admit, by a name saying where it comes from.
type manifest struct {
	name string
	ds   *appsv1.DaemonSet
}

// manifests returns every DaemonSet under testdata and variants of the seed.
func manifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	root := toolbin.RepoPath(t, "testdata")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for i := 0; ; i++ {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if doc["kind"] != "DaemonSet" {
				continue
			}
			delete(doc, "status") // some Argo CD fixtures hold status no API server would write
			js, _ := json.Marshal(doc)
			var ds appsv1.DaemonSet
			if err := json.Unmarshal(js, &ds); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			rel, _ := filepath.Rel(root, path)
			out = append(out, manifest{fmt.Sprintf("%s#%d", rel, i), &ds})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 40 {
		t.Fatalf("found %d DaemonSets under testdata, want the 40 and more there are", len(out))
	}
	cp := "node-role.kubernetes.io/control-plane"
	variant := func(name string, f func(*appsv1.DaemonSet)) {
		ds := seed(t, "variant")
		f(ds)
		out = append(out, manifest{"variant: " + name, ds})
	}
	spec := func(ds *appsv1.DaemonSet) *corev1.PodSpec { return &ds.Spec.Template.Spec }
	variant("no tolerations", func(ds *appsv1.DaemonSet) { spec(ds).Tolerations = nil })
	variant("an empty toleration list", func(ds *appsv1.DaemonSet) { spec(ds).Tolerations = []corev1.Toleration{} })
	variant("the legacy master toleration (the seed)", func(*appsv1.DaemonSet) {})
	variant("a control-plane toleration with another effect", func(ds *appsv1.DaemonSet) {
		spec(ds).Tolerations = []corev1.Toleration{{Key: cp, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}}
	})
	variant("a control-plane toleration for every effect", func(ds *appsv1.DaemonSet) {
		spec(ds).Tolerations = []corev1.Toleration{{Key: cp, Operator: corev1.TolerationOpExists}}
	})
	variant("an Equal control-plane toleration", func(ds *appsv1.DaemonSet) {
		spec(ds).Tolerations = []corev1.Toleration{{Key: cp, Operator: corev1.TolerationOpEqual, Effect: corev1.TaintEffectNoSchedule}}
	})
	variant("tolerate everything", func(ds *appsv1.DaemonSet) {
		spec(ds).Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	})
	variant("tolerate every NoExecute taint, the injected ones already present, in another order", func(ds *appsv1.DaemonSet) {
		spec(ds).Tolerations = []corev1.Toleration{
			{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
			{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "dedicated", Value: "agents", Effect: corev1.TaintEffectNoSchedule},
			{Key: cp, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		}
	})
	variant("tolerationSeconds differ", func(ds *appsv1.DaemonSet) {
		spec(ds).Tolerations = []corev1.Toleration{{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpEqual, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)}}
	})
	variant("a priority class of its own", func(ds *appsv1.DaemonSet) { spec(ds).PriorityClassName = "system-cluster-critical" })
	variant("the opt-out annotation", func(ds *appsv1.DaemonSet) {
		ds.Annotations = map[string]string{admission.OptOutAnnotation: "false"}
	})
	variant("the opt-out annotation set to true (not an opt-out)", func(ds *appsv1.DaemonSet) {
		ds.Annotations = map[string]string{admission.OptOutAnnotation: "true"}
	})
	variant("the ignore label", func(ds *appsv1.DaemonSet) { ds.Labels["daemonguard.io/ignore"] = "true" })
	variant("the agents class's excluded label", func(ds *appsv1.DaemonSet) { ds.Labels["daemonguard-test/skip"] = "yes" })
	return out
}

// admitted is what a dry-run create would store.
type admitted struct {
	template string // spec.template as JSON
	injected bool   // differs from the manifest's
}

// admitAll dry-run creates every manifest in every test namespace.
func admitAll(t *testing.T, ctx context.Context, cases []manifest) map[string]admitted {
	t.Helper()
	out := map[string]admitted{}
	for ns := range testNamespaces {
		for _, c := range cases {
			ds := c.ds.DeepCopy()
			ds.Namespace, ds.ResourceVersion, ds.Status = ns, "", appsv1.DaemonSetStatus{}
			before := injectedFields(&ds.Spec.Template.Spec)
			got, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, ds, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			key := ns + ": " + c.name
			if err != nil {
				// Invalid for the API server itself (testdata/policies/denied has two): the
				// same error is due either way.
				out[key] = admitted{template: "rejected: " + err.Error()}
				continue
			}
			after, _ := json.Marshal(got.Spec.Template)
			out[key] = admitted{template: string(after), injected: before != injectedFields(&got.Spec.Template.Spec)}
		}
	}
	return out
}

// injectedFields renders what injection may change. An empty toleration list and none are
// alike: the API server stores an empty list as none.
func injectedFields(spec *corev1.PodSpec) string {
	raw := []byte("null")
	if len(spec.Tolerations) > 0 {
		raw, _ = json.Marshal(spec.Tolerations)
	}
	return string(raw) + " " + spec.PriorityClassName
}

// createUninjected stores the seed in dg-default while neither the webhook nor the policy is
// registered: a DaemonSet from before daemonguard was installed.
func createUninjected(t *testing.T, ctx context.Context, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := cluster.Client.AppsV1().DaemonSets("dg-default").Create(ctx, seed(t, name), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Spec.Template.Spec.PriorityClassName != "" {
		t.Fatalf("%s was injected with nothing registered", name)
	}
	t.Cleanup(func() {
		_ = cluster.Client.AppsV1().DaemonSets("dg-default").Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return ds
}

// writes performs real writes and describes their outcome (generation and template), keyed by a
// sentence; suffix keeps the objects of the two runs apart.
func writes(t *testing.T, ctx context.Context, suffix string, legacy *appsv1.DaemonSet) map[string]string {
	t.Helper()
	dss := cluster.Client.AppsV1().DaemonSets("dg-default")
	out := map[string]string{}
	describe := func(ds *appsv1.DaemonSet, generation int64) string {
		tmpl, _ := json.Marshal(ds.Spec.Template.Spec.Tolerations)
		return fmt.Sprintf("generation +%d, tolerations %s, priorityClassName %q", ds.Generation-generation, tmpl, ds.Spec.Template.Spec.PriorityClassName)
	}

	// Server-side apply of the seed, then the same apply again (Argo CD's re-sync): no new generation.
	name := "applied-" + suffix
	manifest := seed(t, name)
	manifest.TypeMeta = metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"}
	body, _ := json.Marshal(manifest)
	apply := func() *appsv1.DaemonSet {
		ds, err := dss.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "gitops", Force: ptr.To(true)})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	first := apply()
	t.Cleanup(func() { _ = dss.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	out["server-side apply creates"] = describe(first, 0)
	out["the same apply again"] = describe(apply(), first.Generation)
	// update writes the stored DaemonSet back with change made: read again on a conflict, as the
	// DaemonSet controller writes the status meanwhile.
	update := func(name string, change func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
		var updated *appsv1.DaemonSet
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			stored, err := dss.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			change(stored)
			updated, err = dss.Update(ctx, stored, metav1.UpdateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return updated
	}
	again := update(name, func(*appsv1.DaemonSet) {})
	out["an update with the stored object"] = describe(again, first.Generation)
	revisions, err := cluster.Client.AppsV1().ControllerRevisions("dg-default").List(ctx, metav1.ListOptions{LabelSelector: "app=nginx-ds"})
	if err != nil {
		t.Fatal(err)
	}
	owned := 0
	for _, r := range revisions.Items {
		for _, o := range r.OwnerReferences {
			if o.UID == first.UID {
				owned++
			}
		}
	}
	if owned > 1 {
		t.Errorf("%s: %d ControllerRevisions after re-applies, want at most 1", name, owned)
	}

	// The rollout controller's status annotation on a DaemonSet stored without the injection.
	stored, err := dss.Get(ctx, legacy.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := stored.Generation
	legacy = update(legacy.Name, func(ds *appsv1.DaemonSet) {
		if ds.Annotations == nil {
			ds.Annotations = map[string]string{}
		}
		ds.Annotations["status.daemonguard.io/phase"] = "Progressing"
	})
	out["a status-only update of a template without the injection"] = describe(legacy, base)
	legacy = update(legacy.Name, func(ds *appsv1.DaemonSet) { ds.Labels["team"] = "platform" })
	out["an ordinary update of a template without the injection"] = describe(legacy, base)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
