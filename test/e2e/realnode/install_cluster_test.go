package realnode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/loadgen"
)

// releaseName and releaseNamespace are the README's.
const (
	releaseName      = "dg"
	releaseNamespace = "daemonguard-system"
	// fullname is the chart's resource prefix for release "dg": <release>-daemonguard.
	fullname = releaseName + "-daemonguard"
)

// placementValues are the values a user sets to run daemonguard on control-plane nodes: the
// chart's pods tolerate no taint by default, and here the only node that runs containers is the
// tainted control-plane node (kwok's nodes run none), so both Deployments select it by name and
// tolerate its taint.
var placementValues = fmt.Sprintf(`webhook:
  nodeSelector: {kubernetes.io/hostname: %[1]s}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
controller:
  nodeSelector: {kubernetes.io/hostname: %[1]s}
  tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
`, realNode)

// installed is the chart installed as the README's Install section says.
type installed struct {
	a      *artifacts
	build  build
	values string // the values file: placementValues
}

// install creates the release namespace enforcing the restricted Pod Security level, then runs
// the README's helm install of the pushed chart, and returns once helm's --wait saw every pod Ready.
func install(t *testing.T, a *artifacts, b build, sets ...string) *installed {
	t.Helper()
	ctx := context.Background()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name:   releaseNamespace,
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
		}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil // the previous test's namespace is still terminating
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("create namespace %s: %v", releaseNamespace, err)
	}
	values := filepath.Join(t.TempDir(), "placement.yaml")
	if err := os.WriteFile(values, []byte(placementValues), 0o600); err != nil {
		t.Fatal(err)
	}
	in := &installed{a: a, build: b, values: values}
	args := []string{"install", releaseName, b.chart.Ref, "--version", b.chart.Version, "--plain-http",
		"--namespace", releaseNamespace, "--create-namespace", "-f", values, "--wait", "--timeout", "5m"}
	for _, s := range sets {
		args = append(args, "--set", s)
	}
	start := time.Now()
	a.mustHelm(t, args...)
	t.Logf("helm install %s --version %s: every pod Ready %s after the command started", b.chart.Ref, b.chart.Version, since(start))
	t.Cleanup(func() {
		// Uninstalling takes the webhook configurations away, so a failed test leaves nothing
		// that rejects the next test's DaemonSets.
		_, _ = a.helmRun(context.Background(), "uninstall", releaseName, "--namespace", releaseNamespace, "--wait", "--timeout", "2m")
		_ = cluster.Client.CoreV1().Namespaces().Delete(context.Background(), releaseNamespace, metav1.DeleteOptions{})
	})
	return in
}

// component selects the release's pods of one component: "webhook" or "controller".
func component(name string) string {
	return "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component=" + name
}

// waitChartPods waits until the webhook runs two Ready pods and the controller one, every one
// on the real node, running image and not terminating, and returns them.
func waitChartPods(t *testing.T, image string) (webhooks, controllers []corev1.Pod) {
	t.Helper()
	cluster.WaitFor(t, 3*time.Minute, "the chart's pods Ready on "+realNode+" running "+image, func(ctx context.Context) (bool, string) {
		var err error
		if webhooks, err = readyPods(ctx, component("webhook"), image); err != nil {
			return false, err.Error()
		}
		if controllers, err = readyPods(ctx, component("controller"), image); err != nil {
			return false, err.Error()
		}
		return len(webhooks) == 2 && len(controllers) == 1, fmt.Sprintf("%d webhook and %d controller pods ready", len(webhooks), len(controllers))
	})
	return webhooks, controllers
}

// readyPods returns the release's Ready pods of selector; a pod elsewhere than on the real node,
// on another image, or still terminating is an error or not counted.
func readyPods(ctx context.Context, selector, image string) ([]corev1.Pod, error) {
	pods, err := listPods(ctx, releaseNamespace, selector)
	if err != nil {
		return nil, err
	}
	var ready []corev1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Spec.NodeName != realNode {
			return nil, fmt.Errorf("pod %s was scheduled to %s, not the real node %s", p.Name, p.Spec.NodeName, realNode)
		}
		if p.DeletionTimestamp == nil && clustertest.PodReady(&p) && p.Spec.Containers[0].Image == image {
			ready = append(ready, p)
		}
	}
	return ready, nil
}

// checkServiceClientConfig checks that the API server calls every webhook through the release's
// Service (no webhook.url) with a CA bundle in place.
func checkServiceClientConfig(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	m, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	configs := map[string]admissionregistrationv1.WebhookClientConfig{}
	for _, w := range m.Webhooks {
		configs[w.Name] = w.ClientConfig
	}
	for _, w := range v.Webhooks {
		configs[w.Name] = w.ClientConfig
	}
	if len(configs) < 2 {
		t.Errorf("%d webhooks registered, want at least the pod pin and the DaemonSet validation", len(configs))
	}
	for name, cc := range configs {
		if cc.URL != nil {
			t.Errorf("webhook %s calls URL %s, want the Service", name, *cc.URL)
		}
		if svc := cc.Service; svc == nil || svc.Namespace != releaseNamespace || svc.Name != fullname+"-webhook" {
			t.Errorf("webhook %s calls Service %+v, want %s/%s-webhook", name, svc, releaseNamespace, fullname)
		}
		if len(cc.CABundle) == 0 {
			t.Errorf("webhook %s has no caBundle", name)
		}
	}
}

// waitCABundle waits until every webhook of the release has a caBundle (self-managed: the webhook
// writes it; cert-manager: the cainjector does) equal to want, when want is given.
func waitCABundle(t *testing.T, want func(ctx context.Context) ([]byte, error)) {
	t.Helper()
	cluster.WaitFor(t, 2*time.Minute, "the CA bundle in every webhook", func(ctx context.Context) (bool, string) {
		ca, err := want(ctx)
		if err != nil {
			return false, err.Error()
		}
		m, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		v, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var bundles [][]byte
		for _, w := range m.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
		for _, w := range v.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
		for _, b := range bundles {
			if len(b) == 0 || string(b) != string(ca) {
				return false, "a webhook's caBundle is not the CA yet"
			}
		}
		return true, ""
	})
}

// seedDaemonSet is the seed DaemonSet but for its image: the real node pulls nothing, so it runs
// the node agent built here.
func seedDaemonSet(t *testing.T, image string) string {
	t.Helper()
	return clustertest.SeedYAML(t, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = image })
}

// checkSeed applies the seed DaemonSet in ns and shows what the README's demo shows, with a real
// container on the tainted control-plane node: the template got the control-plane tolerations and
// the priority class, and the DaemonSet runs on every node, the real one included.
func checkSeed(t *testing.T, ns, image string) {
	t.Helper()
	ctx := context.Background()
	clustertest.Kubectl(t, cluster, seedDaemonSet(t, image), "apply", "-n", ns, "-f", "-")
	ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, "nginx-ds", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if !hasToleration(spec.Tolerations, "node-role.kubernetes.io/control-plane") || spec.PriorityClassName != "system-node-critical" {
		t.Fatalf("nginx-ds stored with tolerations %+v and priorityClassName %q, want the control-plane toleration and system-node-critical", spec.Tolerations, spec.PriorityClassName)
	}
	nodes := len(clusterNodes())
	var real *corev1.Pod
	cluster.WaitFor(t, 2*time.Minute, "nginx-ds Ready on every node, its real container on "+realNode, func(ctx context.Context) (bool, string) {
		ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, "nginx-ds", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pods, err := listPods(ctx, ns, "app=nginx-ds")
		if err != nil {
			return false, err.Error()
		}
		real = nil
		for i := range pods {
			if pods[i].Spec.NodeName == realNode && clustertest.PodReady(&pods[i]) {
				real = &pods[i]
			}
		}
		st := ds.Status
		return real != nil && st.NumberReady == int32(nodes) && st.DesiredNumberScheduled == int32(nodes),
			fmt.Sprintf("desired %d, ready %d, pod on %s ready: %t", st.DesiredNumberScheduled, st.NumberReady, realNode, real != nil)
	})
	if real.Spec.Priority == nil || *real.Spec.Priority != 2000001000 {
		t.Errorf("the pod on %s has priority %v, want 2000001000 (system-node-critical)", realNode, real.Spec.Priority)
	}
	cs := real.Status.ContainerStatuses
	if len(cs) != 1 || cs[0].State.Running == nil || !strings.HasPrefix(cs[0].ContainerID, "containerd://") || cs[0].ImageID == "" {
		t.Fatalf("the pod on %s reports %+v, want one container running under containerd", realNode, cs)
	}
	if _, err := containerProcess(cs[0].ContainerID); err != nil {
		t.Errorf("the container of %s on %s: %v", real.Name, realNode, err)
	}
	t.Logf("nginx-ds: %d of %d nodes, pod %s on %s runs container %s (image %s)", nodes, nodes, real.Name, realNode, shortID(cs[0].ContainerID), cs[0].ImageID)
}

// checkDenied applies testdata/demo-policy/wide-budget.yaml, which the API server accepts and a
// built-in policy forbids, and checks that the denial names the policy.
func checkDenied(t *testing.T, ns string) {
	t.Helper()
	path := toolbin.RepoPath(t, "testdata", "demo-policy", "wide-budget.yaml")
	out, stderr, err := cluster.Kubectl(context.Background(), "", "apply", "-n", ns, "-f", path)
	if err == nil {
		t.Fatalf("kubectl apply wide-budget.yaml was admitted:\n%s", out)
	}
	for _, want := range []string{"denied", "daemonguard", "[rolling_update_budget]", `maxUnavailable "100%"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the denial does not say %q:\n%s", want, stderr)
		}
	}
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Get(context.Background(), "log-shipper", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("log-shipper after its denial: %v, want not found", err)
	}
}

// checkSecurity finds each container's main process on the host and checks what the restricted
// securityContext asks, as the kernel applies it: uid and gid 65532, no effective, permitted or
// bounding capabilities, no_new_privs, a seccomp filter, and a read-only root filesystem.
func checkSecurity(t *testing.T, pods []corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		for _, cs := range p.Status.ContainerStatuses {
			proc, err := containerProcess(cs.ContainerID)
			if err != nil {
				t.Errorf("pod %s: %v", p.Name, err)
				continue
			}
			for field, want := range map[string]string{
				"Uid":        "65532\t65532\t65532\t65532",
				"Gid":        "65532\t65532\t65532\t65532",
				"CapEff":     "0000000000000000",
				"CapPrm":     "0000000000000000",
				"CapBnd":     "0000000000000000",
				"NoNewPrivs": "1",
				"Seccomp":    "2",
			} {
				if got := proc.status[field]; got != want {
					t.Errorf("pod %s container %s (host pid %d): %s %q, want %q", p.Name, cs.Name, proc.pid, field, got, want)
				}
			}
			if !proc.rootReadOnly {
				t.Errorf("pod %s container %s (host pid %d): the root filesystem is mounted %q, want ro", p.Name, cs.Name, proc.pid, proc.rootOptions)
			}
			if len(proc.cmdline) == 0 || proc.cmdline[0] != "/ko-app/daemonguard" {
				t.Errorf("pod %s container %s (host pid %d) runs %q, want /ko-app/daemonguard", p.Name, cs.Name, proc.pid, proc.cmdline)
			}
			t.Logf("pod %s container %s: host pid %d, %s, Uid %s, CapEff %s, NoNewPrivs %s, Seccomp %s, / %s",
				p.Name, cs.Name, proc.pid, strings.Join(proc.cmdline[:min(2, len(proc.cmdline))], " "), strings.Fields(proc.status["Uid"])[0],
				proc.status["CapEff"], proc.status["NoNewPrivs"], proc.status["Seccomp"], proc.rootOptions)
		}
	}
}

// checkGC checks what each container's Go runtime was started with: the webhook the chart's GOGC
// and GOMEMLIMIT (loadgen.ChartGC, the chart's defaults), the controller Go's defaults.
func checkGC(t *testing.T, webhooks, controllers []corev1.Pod) {
	t.Helper()
	check := func(p corev1.Pod, want map[string]string) {
		for _, cs := range p.Status.ContainerStatuses {
			proc, err := containerProcess(cs.ContainerID)
			if err != nil {
				t.Errorf("pod %s: %v", p.Name, err)
				continue
			}
			for name, value := range want {
				if got := proc.environ[name]; got != value {
					t.Errorf("pod %s container %s (host pid %d): %s=%q, want %q", p.Name, cs.Name, proc.pid, name, got, value)
				}
			}
		}
	}
	chart := map[string]string{}
	for _, kv := range loadgen.ChartGC {
		k, v, _ := strings.Cut(kv, "=")
		chart[k] = v
	}
	for _, p := range webhooks {
		check(p, chart)
	}
	for _, p := range controllers {
		check(p, map[string]string{"GOGC": "", "GOMEMLIMIT": ""})
	}
}

// checkUninstalled uninstalls the release and checks that nothing of it blocks the cluster: no
// webhook configuration is left and a DaemonSet create in ns succeeds.
func checkUninstalled(t *testing.T, a *artifacts, ns string) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	a.mustHelm(t, "uninstall", releaseName, "--namespace", releaseNamespace, "--wait", "--timeout", "2m")
	t.Logf("helm uninstall --wait took %s", since(start))
	if _, err := cluster.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("mutating webhook configuration after uninstall: %v", err)
	}
	if _, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("validating webhook configuration after uninstall: %v", err)
	}
	// The API server drops the in-process injection policy a moment after its deletion, so
	// whether this one is injected is not asserted: only that nothing blocks it.
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Create(ctx, inertDaemonSet("after-uninstall"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a DaemonSet create after helm uninstall: %v", err)
	}
}

// inertDaemonSet is a minimal DaemonSet nothing is injected into, whose pods fit no node: writes
// of it exercise admission without starting containers.
func inertDaemonSet(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"e2e.daemonguard.io/no-node": "true"},
					Containers:   []corev1.Container{{Name: "agent", Image: "agent:1"}},
				},
			},
		},
	}
}

func shortID(containerID string) string {
	id := containerID[strings.Index(containerID, "://")+3:]
	return id[:min(12, len(id))]
}
