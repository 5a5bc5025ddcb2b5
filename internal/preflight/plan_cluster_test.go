package preflight_test

// A differential test of `daemonguard rollout plan`: on the local cluster (the real DaemonSet
// controller and scheduler, kwok nodes, daemonguard's webhook registered as the cluster runs it),
// each change to a DaemonSet is planned, then applied with kubectl apply, and once the controller
// and the scheduler have settled every node's real outcome is compared with the plan's:
// gains / loses / replaced / unchanged, a new pod left Pending as unschedulable, and the pods
// preempted for it, by name. The real components are the reference.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/internal/preflight"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// The priority classes of the other pods and of one DaemonSet change. The daemon pods otherwise
// get system-node-critical (2000001000), injected by the webhook.
const (
	classLow    = "plan-low"    // 100
	classLower  = "plan-lower"  // 50
	classLowest = "plan-lowest" // 40: below every other pod's, the daemon pod cannot preempt
	// classNever is above every other pod's but may not preempt (preemptionPolicy Never).
	classNever = "plan-never" // 1000000
)

// planNodes is the topology: a tainted control-plane node, three zones, a node with a taint the
// DaemonSet does not tolerate, a full node, a node crowded by lower-priority pods, a node whose
// host port 9100 is held, and a node with room for one pod only.
func planNodes() []localcluster.Node {
	room := func(cpu string, pods ...string) corev1.ResourceList {
		l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110")}
		for _, p := range pods {
			l[corev1.ResourcePods] = resource.MustParse(p)
		}
		return l
	}
	zone := func(z string, more ...string) map[string]string {
		l := map[string]string{localcluster.ZoneLabel: z}
		for i := 0; i+1 < len(more); i += 2 {
			l[more[i]] = more[i+1]
		}
		return l
	}
	return []localcluster.Node{
		localcluster.ControlPlaneNode("control-plane-0"),
		{Name: "worker-0", Labels: zone("zone-a", "tier", "web")},
		{Name: "worker-1", Labels: zone("zone-b", "tier", "web")},
		{Name: "worker-2", Labels: zone("zone-c")},
		{Name: "dedicated-0", Labels: zone("zone-b"), Taints: []corev1.Taint{{Key: "dedicated", Value: "infra", Effect: corev1.TaintEffectNoSchedule}}},
		{Name: "full-0", Labels: zone("zone-c"), Allocatable: room("1")},
		{Name: "crowded-0", Labels: zone("zone-a"), Allocatable: room("2")},
		{Name: "ports-0", Labels: zone("zone-b")},
		{Name: "tiny-0", Labels: zone("zone-c"), Allocatable: room("4", "1")},
	}
}

// fixturePods are the other pods on the nodes, bound by name. The filler has the daemon pods'
// injected priority, so it is never preempted and full-0 has 100m of CPU left; crowded-0 has
// 200m left, held by two lower-priority pods of different priorities (so the victim the
// scheduler picks does not hang on start times); the port holder (9100), the bystander and
// tiny-0's only pod have a lower priority than the daemon pods, the port keeper (9101) the same.
func fixturePods() []*corev1.Pod {
	pod := func(name, node, class, cpu string, hostPort int32) *corev1.Pod {
		c := corev1.Container{Name: "app", Image: "app:1"}
		if cpu != "" {
			c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
		}
		if hostPort != 0 {
			c.Ports = []corev1.ContainerPort{{ContainerPort: hostPort, HostPort: hostPort}}
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": "fixture", "name": name}},
			Spec:       corev1.PodSpec{NodeName: node, PriorityClassName: class, Containers: []corev1.Container{c}},
		}
	}
	return []*corev1.Pod{
		pod("filler", "full-0", "system-node-critical", "900m", 0),
		pod("low-a", "crowded-0", classLow, "900m", 0),
		pod("low-b", "crowded-0", classLower, "900m", 0),
		pod("port-holder", "ports-0", classLow, "", 9100),
		pod("port-keeper", "worker-1", "system-node-critical", "", 9101),
		pod("bystander", "worker-2", classLower, "100m", 0),
		pod("tiny-low", "tiny-0", classLow, "", 0),
	}
}

// agent is the seeded DaemonSet. maxUnavailable 100% (allowed by the policy ConfigMap the test
// installs) replaces every node at once, so a new pod that stays Pending does not hold the
// rolling update back from the other nodes.
const agent = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate: {maxUnavailable: "100%"}
  template:
    metadata:
      labels: {app: agent}
    spec:
      containers:
      - name: agent
        image: agent:1
        resources:
          requests: {cpu: 50m, memory: 32Mi}
`

// withSpec appends fields to agent's pod template spec.
func withSpec(lines string) string { return agent + lines }

// replace is agent with old replaced by new (which must occur once).
func replace(old, new string) string { return edit(agent, old, new) }

// edit is manifest with old replaced by new (which must occur once).
func edit(manifest, old, new string) string {
	if strings.Count(manifest, old) != 1 {
		panic(fmt.Sprintf("%q occurs %d times in the manifest", old, strings.Count(manifest, old)))
	}
	return strings.Replace(manifest, old, new, 1)
}

// Manifest edits the cases share.
const (
	onDelete    = "    type: OnDelete\n"
	rolling     = "    type: RollingUpdate\n    rollingUpdate: {maxUnavailable: \"100%\"}\n"
	surge       = "    type: RollingUpdate\n    rollingUpdate: {maxUnavailable: 0, maxSurge: \"100%\"}\n"
	toleration  = "      tolerations:\n      - {key: dedicated, operator: Equal, value: infra, effect: NoSchedule}\n"
	image1      = "image: agent:1"
	requests50m = "cpu: 50m"
)

// TestPlanMatchesTheCluster runs the differential test, and the plan as a read-only identity
// bound to the chart's pre-flight roles. One cluster serves every subtest; each works in a
// namespace of its own with fresh fixture pods, and deletes them before the next starts.
func TestPlanMatchesTheCluster(t *testing.T) {
	localcluster.NeedCluster(t)
	started := time.Now()
	c := startPlanCluster(t)
	t.Logf("cluster, webhook and policies ready in %s", time.Since(started).Round(time.Millisecond))

	changes := map[string]struct {
		seed   string // applied and settled first; "" when the change creates the DaemonSet
		change string
		// deleteOld deletes the pods of the old revision once the change has settled, as an
		// OnDelete DaemonSet's owner does, and compares after that.
		deleteOld bool
		// budget protects low-b with a PodDisruptionBudget that allows no disruption.
		budget bool
		// injection is the plan's admission.injection; "" means "webhook".
		injection string
		// stalls says the plan must predict that the rolling update stops early: the nodes it
		// did not reach (which, the order is not fixed) keep their old pod.
		stalls bool
		// tenant runs the case in a namespace not marked for node agents.
		tenant bool
	}{
		"a create: the injected toleration adds the control plane, the injected priority preempts": {
			change: replace(requests50m, "cpu: 300m"),
		},
		"a new toleration lets the pod onto the dedicated node": {
			seed: agent, change: withSpec(toleration),
		},
		"a toleration removed: the rolling update deletes the pod on the tainted node and creates none": {
			seed: withSpec(toleration), change: agent,
		},
		"a required node affinity on zones": {
			seed: agent, change: withSpec("      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n" +
				"            nodeSelectorTerms:\n            - matchExpressions:\n              - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a, zone-b]}\n"),
		},
		"OnDelete: nothing is replaced until the old pods are deleted, then bigger pods preempt": {
			seed: edit(agent, rolling, onDelete), change: edit(edit(withSpec(toleration), rolling, onDelete), requests50m, "cpu: 500m"), deleteOld: true,
		},
		"OnDelete with a toleration removed: the tainted node keeps its pod until it is deleted": {
			seed: edit(withSpec(toleration), rolling, onDelete), change: edit(edit(agent, rolling, onDelete), image1, "image: agent:2"), deleteOld: true,
		},
		"a create with the ignore label the webhook skips: no control plane, no priority to preempt with": {
			change: edit(replace("  name: agent\n", "  name: agent\n  labels: {daemonguard.io/ignore: \"true\"}\n"), requests50m, "cpu: 300m"), injection: "not called",
		},
		"a create in a tenant's namespace: no injection, so no control plane and no priority to preempt with": {
			change: replace(requests50m, "cpu: 300m"), injection: "not called", tenant: true,
		},
		"an init container asking more than the containers": {
			seed: agent, change: replace("      containers:\n", "      initContainers:\n      - {name: setup, image: setup:1, resources: {requests: {cpu: 500m}}}\n      containers:\n"),
		},
		"maxSurge: the old pod keeps its room until the new one is available": {
			seed: edit(agent, rolling, surge), change: edit(edit(agent, rolling, surge), requests50m, "cpu: 180m"),
		},
		"limits without requests: the API server makes them the requests": {
			seed: agent, change: replace("requests: {cpu: 50m, memory: 32Mi}", "limits: {cpu: 500m, memory: 64Mi}"),
		},
		"a priority class that may not preempt: bigger pods stay Pending": {
			seed: agent, change: edit(withSpec("      priorityClassName: "+classNever+"\n"), requests50m, "cpu: 500m"),
		},
		"a new node selector takes the pod off the nodes without the label": {
			seed: agent, change: withSpec("      nodeSelector: {tier: web}\n"),
		},
		"an image change replaces every pod": {
			seed: agent, change: replace(image1, "image: agent:2"),
		},
		"a label on the DaemonSet only: no new revision, no pod touched": {
			seed: agent, change: replace("  name: agent\n", "  name: agent\n  labels: {team: infra}\n"),
		},
		"a priority class below the other pods: bigger pods cannot preempt and stay Pending": {
			seed: agent, change: edit(withSpec("      priorityClassName: "+classLowest+"\n"), requests50m, "cpu: 500m"),
		},
		"host ports: a lower-priority holder is preempted, an equal one keeps the pod Pending": {
			seed: agent, change: replace("        image: agent:1\n", "        image: agent:1\n        ports:\n        - {containerPort: 9100, hostPort: 9100}\n        - {containerPort: 9101, hostPort: 9101}\n"),
		},
		"maxUnavailable 1 and two nodes where the new pod cannot fit: the rolling update stalls": {
			seed:   edit(agent, rolling, "    type: RollingUpdate\n    rollingUpdate: {maxUnavailable: 1}\n"),
			change: edit(edit(withSpec("      priorityClassName: "+classLowest+"\n"), rolling, "    type: RollingUpdate\n    rollingUpdate: {maxUnavailable: 1}\n"), requests50m, "cpu: 500m"),
			stalls: true,
		},
		"bigger requests: the lowest-priority pod is preempted, the full node leaves the pod Pending": {
			seed: agent, change: replace(requests50m, "cpu: 500m"),
		},
		"bigger requests, the lowest-priority pod under a PodDisruptionBudget: the scheduler spares it": {
			seed: agent, change: replace(requests50m, "cpu: 500m"), budget: true,
		},
	}
	names := make([]string, 0, len(changes))
	for name := range changes {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		tc := changes[name]
		t.Run(name, func(t *testing.T) {
			subStart := time.Now()
			ns := fmt.Sprintf("plan-%d", i)
			c.freshNamespace(t, ns, tc.tenant)
			c.createFixtures(t, ns)
			if tc.budget {
				c.protect(t, ns, "low-b")
			}
			if tc.seed != "" {
				clustertest.Kubectl(t, c.cluster, tc.seed, "apply", "-n", ns, "-f", "-")
				c.waitSettled(t, ns, "agent")
			}
			before := c.snapshot(t, ns)

			file := filepath.Join(t.TempDir(), "agent.yaml")
			if err := os.WriteFile(file, []byte(tc.change), 0o644); err != nil {
				t.Fatal(err)
			}
			report := c.plan(t, c.cluster.KubeconfigPath, ns, file)
			if want := cmp.Or(tc.injection, "webhook"); report.Admission.Injection != want {
				t.Errorf("admission.injection %q, want %q", report.Admission.Injection, want)
			}

			clustertest.Kubectl(t, c.cluster, tc.change, "apply", "-n", ns, "-f", "-")
			c.waitSettled(t, ns, "agent")
			want := planned(t, report)
			if tc.deleteOld {
				// OnDelete replaces nothing by itself: a node the plan replaces or keeps still
				// runs its pod. Once the old pods are deleted, a kept node has lost its pod.
				compareOutcomes(t, "before the old pods are deleted", onDeleteBeforeDeletion(want), c.outcomes(t, ns, before))
				c.deleteOldPods(t, ns, "agent")
				c.waitSettled(t, ns, "agent")
				want = onDeleteAfterDeletion(want)
			}
			got := c.outcomes(t, ns, before)
			if report.Plan.Rollout.Stalls != tc.stalls {
				t.Errorf("the plan says the rollout stalls: %v, want %v (%s)", report.Plan.Rollout.Stalls, tc.stalls, report.Plan.Rollout.Summary)
			}
			when := "settled"
			if tc.stalls {
				var unreached int
				if want, unreached = notReached(want, got); unreached == 0 {
					t.Errorf("the plan says the rolling update stalls, but it replaced every node")
				}
				when = fmt.Sprintf("stalled (%d replaced nodes not reached, shown unchanged on both sides)", unreached)
			}
			compareOutcomes(t, when, want, got)
			t.Logf("planned, applied and compared in %s", time.Since(subStart).Round(time.Millisecond))
		})
	}

	t.Run("a read-only identity bound to the chart's pre-flight roles", func(t *testing.T) {
		c.testReadOnlyIdentity(t)
	})
	t.Logf("TestPlanMatchesTheCluster took %s", time.Since(started).Round(time.Millisecond))
}

// planCluster is the cluster of the differential test.
type planCluster struct {
	cluster *localcluster.Cluster
}

// startPlanCluster starts the cluster with planNodes, daemonguard's webhook registered with it,
// the priority classes and a policy ConfigMap that allows maxUnavailable 100%.
func startPlanCluster(t *testing.T) *planCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	lc, err := localcluster.Start(ctx, localcluster.Config{Nodes: planNodes(), Log: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			lc.StopKeepLogs()
			t.Logf("component logs kept in %s/logs", lc.Dir)
			return
		}
		lc.Stop()
	})
	c := &planCluster{cluster: lc}
	for name, value := range map[string]int32{classLow: 100, classLower: 50, classLowest: 40, classNever: 1000000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if name == classNever {
			never := corev1.PreemptNever
			pc.PreemptionPolicy = &never
		}
		if _, err := lc.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := harness.StartWebhook(ctx, lc, harness.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	policy := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "plan-budget", Namespace: harness.WebhookNamespace, Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}},
		Data:       map[string]string{"parameters.yaml": "policies:\n  rolling_update_budget:\n    default: {maxUnavailablePercent: 100}\n"},
	}
	if _, err := lc.Client.CoreV1().ConfigMaps(harness.WebhookNamespace).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The webhook compiles the ConfigMap in the background: wait until it admits the agent.
	var probe appsv1.DaemonSet
	if err := yaml.Unmarshal([]byte(agent), &probe); err != nil {
		t.Fatal(err)
	}
	lc.WaitFor(t, time.Minute, "the webhook admits maxUnavailable 100%", func(ctx context.Context) (bool, string) {
		_, err := lc.Client.AppsV1().DaemonSets(metav1.NamespaceDefault).Create(ctx, probe.DeepCopy(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	return c
}

// freshNamespace waits until no pod of an earlier subtest is left anywhere in the cluster,
// creates ns (marked for node agents unless tenant), and when the test ends deletes it and waits until its pods are gone, so the next
// subtest's plan and scheduler see none of them. Both waits retry through an API server that a
// loaded machine makes slow.
func (c *planCluster) freshNamespace(t *testing.T, ns string, tenant bool) {
	t.Helper()
	ctx := context.Background()
	c.waitNoPods(t, "")
	if err := c.cluster.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if tenant {
		clustertest.Kubectl(t, c.cluster, "", "label", "namespace", ns, admission.NodeAgentsLabel+"-")
	}
	t.Cleanup(func() {
		c.cluster.WaitFor(t, 2*time.Minute, "namespace "+ns+" deleted", func(ctx context.Context) (bool, string) {
			err := c.cluster.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err.Error()
			}
			return true, ""
		})
		c.waitNoPods(t, ns)
	})
}

// waitNoPods waits until namespace ns ("" for every namespace) has no pods.
func (c *planCluster) waitNoPods(t *testing.T, ns string) {
	t.Helper()
	c.cluster.WaitFor(t, 3*time.Minute, "no pods in namespace "+cmp.Or(ns, "(all)"), func(ctx context.Context) (bool, string) {
		pods, err := c.cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(pods.Items) > 0 {
			return false, fmt.Sprintf("%d pods left, %s/%s first", len(pods.Items), pods.Items[0].Namespace, pods.Items[0].Name)
		}
		return true, ""
	})
}

// createFixtures creates fixturePods in ns and waits until kwok runs them.
func (c *planCluster) createFixtures(t *testing.T, ns string) {
	t.Helper()
	pods := c.cluster.Client.CoreV1().Pods(ns)
	for _, p := range fixturePods() {
		if _, err := pods.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create fixture pod %s: %v", p.Name, err)
		}
	}
	c.cluster.WaitFor(t, time.Minute, "fixture pods ready", func(ctx context.Context) (bool, string) {
		list, err := pods.List(ctx, metav1.ListOptions{LabelSelector: "role=fixture"})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for i := range list.Items {
			if clustertest.PodReady(&list.Items[i]) {
				ready++
			}
		}
		return ready == len(fixturePods()), fmt.Sprintf("%d of %d ready", ready, len(fixturePods()))
	})
}

// protect creates a PodDisruptionBudget that allows no disruption of the fixture pod name, and
// waits until the disruption controller says so.
func (c *planCluster) protect(t *testing.T, ns, name string) {
	t.Helper()
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": name}}},
	}
	budgets := c.cluster.Client.PolicyV1().PodDisruptionBudgets(ns)
	if _, err := budgets.Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.cluster.WaitFor(t, time.Minute, "PodDisruptionBudget "+name+" computed", func(ctx context.Context) (bool, string) {
		got, err := budgets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		s := got.Status
		return s.ObservedGeneration == got.Generation && s.CurrentHealthy == 1 && s.DisruptionsAllowed == 0, fmt.Sprintf("status %+v", s)
	})
}

// waitSettled waits until the DaemonSet controller and the scheduler are done with the
// DaemonSet's current generation: the controller observed it and counts every node it wants a
// pod on, and the pods it leaves on nodes it does not want (a NoSchedule taint not tolerated
// keeps a running pod); nothing in the namespace is terminating; every
// pod of the newest revision is Ready, or Pending with the scheduler's verdict Unschedulable and
// no node nominated (a pod with a nominated node waits for the victims of its preemption); and a
// pod of an older revision is left only where the controller leaves it: OnDelete, a surge whose
// new pod cannot be scheduled, or a rolling update whose budget such new pods hold.
func (c *planCluster) waitSettled(t *testing.T, ns, name string) {
	t.Helper()
	var last string // what the last complete check saw, not a request cut by the deadline
	c.cluster.WaitFor(t, 2*time.Minute, "DaemonSet "+ns+"/"+name+" settled", func(ctx context.Context) (bool, string) {
		ok, why := c.settled(ctx, ns, name)
		if ctx.Err() == nil {
			last = why
		}
		return ok, last
	})
}

// settled is waitSettled's check.
func (c *planCluster) settled(ctx context.Context, ns, name string) (bool, string) {
	client := c.cluster.Client
	ds, err := client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	s := ds.Status
	onDelete := ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
	// updatedNumberScheduled is not waited for: it judges a node by its oldest pod, the old
	// one where a surge's new pod cannot be scheduled.
	switch {
	case s.ObservedGeneration < ds.Generation:
		return false, fmt.Sprintf("observed generation %d of %d", s.ObservedGeneration, ds.Generation)
	case s.CurrentNumberScheduled != s.DesiredNumberScheduled:
		return false, fmt.Sprintf("status %+v", s)
	}
	hash, err := newestHash(ctx, c, ds)
	if err != nil {
		return false, err.Error()
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	byNode := map[string][]*corev1.Pod{}
	stuck := 0 // new pods the scheduler found no place for
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			return false, "pod " + p.Name + " terminating"
		}
		if ownedBy(p, ds) {
			byNode[podNode(p)] = append(byNode[podNode(p)], p)
			if p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash && unschedulable(p) && p.Status.NominatedNodeName == "" {
				stuck++
			}
		}
	}
	// A rolling update without surge whose unschedulable new pods are as many as it may have
	// unavailable deletes no more old pods.
	budgetHeld := false
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil && (ru.MaxSurge == nil || ru.MaxSurge.IntValue() == 0 && ru.MaxSurge.Type == intstr.Int) {
		budget, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, int(s.DesiredNumberScheduled), true)
		budgetHeld = err == nil && stuck >= budget
	}
	for node, onNode := range byNode {
		var fresh, old []*corev1.Pod
		for _, p := range onNode {
			if p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash {
				fresh = append(fresh, p)
			} else {
				old = append(old, p)
			}
		}
		if len(fresh) > 1 || len(old) > 1 {
			return false, fmt.Sprintf("node %s has %d new and %d old pods", node, len(fresh), len(old))
		}
		for _, p := range fresh {
			if !clustertest.PodReady(p) && !(unschedulable(p) && p.Status.NominatedNodeName == "") {
				return false, fmt.Sprintf("pod %s %s (nominated node %q)", p.Name, p.Status.Phase, p.Status.NominatedNodeName)
			}
		}
		if len(old) > 0 && !onDelete && !budgetHeld && (len(fresh) == 0 || !unschedulable(fresh[0])) {
			return false, "pod " + old[0].Name + " of an old revision on " + node
		}
	}
	if int32(len(byNode)) != s.DesiredNumberScheduled+s.NumberMisscheduled {
		return false, fmt.Sprintf("pods on %d nodes, %d desired, %d misscheduled", len(byNode), s.DesiredNumberScheduled, s.NumberMisscheduled)
	}
	return true, ""
}

// newestHash is the controller-revision-hash of the DaemonSet's newest ControllerRevision.
func newestHash(ctx context.Context, c *planCluster, ds *appsv1.DaemonSet) (string, error) {
	revs, err := c.cluster.Client.AppsV1().ControllerRevisions(ds.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	var newest *appsv1.ControllerRevision
	for i := range revs.Items {
		r := &revs.Items[i]
		if ref := metav1.GetControllerOf(r); ref != nil && ref.UID == ds.UID && (newest == nil || r.Revision > newest.Revision) {
			newest = r
		}
	}
	if newest == nil {
		return "", fmt.Errorf("no ControllerRevision of %s yet", ds.Name)
	}
	return newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey], nil
}

// deleteOldPods deletes the DaemonSet's pods of older revisions, as an OnDelete DaemonSet's
// owner does.
func (c *planCluster) deleteOldPods(t *testing.T, ns, name string) {
	t.Helper()
	ctx := context.Background()
	ds, err := c.cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hash, err := newestHash(ctx, c, ds)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.snapshot(t, ns).daemonPods {
		if p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] != hash {
			if err := c.cluster.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// notReached is a stalled rolling update's plan against what it did: a node the plan replaces
// that still runs its old pod was not reached. It returns how many.
func notReached(plan, real map[string]outcome) (map[string]outcome, int) {
	out, n := map[string]outcome{}, 0
	for node, o := range plan {
		if o.Change == preflight.Replaced && real[node].Change == preflight.Unchanged {
			o, n = outcome{Change: preflight.Unchanged}, n+1
		}
		out[node] = o
	}
	return out, n
}

// onDeleteBeforeDeletion is what an OnDelete plan means until the old pods are deleted: the
// nodes it replaces or keeps are unchanged.
func onDeleteBeforeDeletion(plan map[string]outcome) map[string]outcome {
	out := map[string]outcome{}
	for n, o := range plan {
		if o.Change == preflight.Replaced || o.Change == preflight.Keeps {
			o = outcome{Change: preflight.Unchanged}
		}
		out[n] = o
	}
	return out
}

// onDeleteAfterDeletion is what it means once they are: a kept pod, deleted, is not recreated.
func onDeleteAfterDeletion(plan map[string]outcome) map[string]outcome {
	out := map[string]outcome{}
	for n, o := range plan {
		if o.Change == preflight.Keeps {
			o = outcome{Change: preflight.Loses}
		}
		out[n] = o
	}
	return out
}

// state is what a namespace runs, node by node.
type state struct {
	// daemonPods are the DaemonSet's pods, by node: the newest where a surge runs two.
	daemonPods map[string]*corev1.Pod
	fixtures   map[string]string // fixture pod name -> node
}

// snapshot reads the DaemonSet's pods (none when it does not exist) and the fixture pods.
func (c *planCluster) snapshot(t *testing.T, ns string) state {
	t.Helper()
	ctx := context.Background()
	s := state{daemonPods: map[string]*corev1.Pod{}, fixtures: map[string]string{}}
	ds, err := c.cluster.Client.AppsV1().DaemonSets(ns).Get(ctx, "agent", metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		t.Fatal(err)
	}
	var hash string
	if ds != nil {
		if hash, err = newestHash(ctx, c, ds); err != nil {
			t.Fatal(err)
		}
	}
	pods, err := c.cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case ds != nil && ownedBy(p, ds):
			node := podNode(p)
			if _, ok := s.daemonPods[node]; !ok || p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash {
				s.daemonPods[node] = p
			}
		case p.Labels["role"] == "fixture":
			s.fixtures[p.Name] = p.Spec.NodeName
		}
	}
	return s
}

// outcome is what happened to one node.
type outcome struct {
	Change    preflight.Change
	NotFit    bool     // the new pod stays Pending, unschedulable
	Preempted []string // pods evicted for the new pod, sorted
}

func (o outcome) String() string {
	s := string(o.Change)
	if o.NotFit {
		s += ", not fit"
	}
	if len(o.Preempted) > 0 {
		s += ", preempts " + strings.Join(o.Preempted, " ")
	}
	return s
}

// outcomes is what the controller and the scheduler did to every node, from the state before
// the apply and the state now.
func (c *planCluster) outcomes(t *testing.T, ns string, before state) map[string]outcome {
	t.Helper()
	after := c.snapshot(t, ns)
	nodes, err := c.cluster.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]outcome{}
	for _, n := range nodes.Items {
		old, now := before.daemonPods[n.Name], after.daemonPods[n.Name]
		var o outcome
		switch {
		case old == nil && now == nil:
			o.Change = preflight.None
		case old == nil:
			o.Change = preflight.Gains
		case now == nil:
			o.Change = preflight.Loses
		case old.UID == now.UID:
			o.Change = preflight.Unchanged
		default:
			o.Change = preflight.Replaced
		}
		o.NotFit = (o.Change == preflight.Gains || o.Change == preflight.Replaced) && unschedulable(now)
		for name, node := range before.fixtures {
			if _, still := after.fixtures[name]; !still && node == n.Name {
				o.Preempted = append(o.Preempted, ns+"/"+name)
			}
		}
		sort.Strings(o.Preempted)
		out[n.Name] = o
	}
	return out
}

// planned is the plan's outcome for every node.
func planned(t *testing.T, r preflight.Report) map[string]outcome {
	t.Helper()
	out := map[string]outcome{}
	for _, n := range r.Plan.Nodes {
		o := outcome{Change: n.Change}
		if n.Fit != nil {
			o.NotFit = !n.Fit.Schedulable
			for _, v := range n.Fit.Preempts {
				o.Preempted = append(o.Preempted, v.Namespace+"/"+v.Name)
			}
			sort.Strings(o.Preempted)
		}
		out[n.Node] = o
	}
	return out
}

// compareOutcomes compares the plan's outcome of every node with the cluster's, when (a
// sentence for the log).
func compareOutcomes(t *testing.T, when string, plan, real map[string]outcome) {
	t.Helper()
	var nodes []string
	for n := range real {
		nodes = append(nodes, n)
	}
	for n := range plan {
		if _, ok := real[n]; !ok {
			nodes = append(nodes, n)
		}
	}
	sort.Strings(nodes)
	var table strings.Builder
	mismatch := false
	for _, n := range nodes {
		p, pok := plan[n]
		r, rok := real[n]
		mark := "  "
		if !pok || !rok || p.String() != r.String() {
			mark, mismatch = "✗ ", true
		}
		fmt.Fprintf(&table, "%s%-16s plan: %-40s real: %s\n", mark, n, p, r)
	}
	if mismatch {
		t.Errorf("%s, the plan and the cluster disagree:\n%s", when, table.String())
		return
	}
	t.Logf("%s, every node as planned:\n%s", when, table.String())
}

// plan runs `daemonguard rollout plan -f file -o json` with kubeconfig, in namespace ns, and
// returns the one DaemonSet's report; it fails the test unless the plan was made.
func (c *planCluster) plan(t *testing.T, kubeconfig, ns, file string) preflight.Report {
	t.Helper()
	out, err := runPlan(kubeconfig, ns, file)
	if code := cli.ExitCode(err); code != 0 && code != 3 {
		t.Fatalf("rollout plan: %v (exit code %d)\n%s", err, code, out)
	}
	var doc struct {
		Items    []preflight.Report `json:"items"`
		ExitCode int                `json:"exitCode"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("decode the plan: %v\n%s", err, out)
	}
	if len(doc.Items) != 1 || doc.Items[0].Plan == nil {
		t.Fatalf("want one planned DaemonSet, got:\n%s", out)
	}
	r := doc.Items[0]
	if doc.ExitCode != cli.ExitCode(err) {
		t.Errorf("exitCode %d in the JSON, the command exits %d", doc.ExitCode, cli.ExitCode(err))
	}
	if !r.Admission.Allowed {
		t.Errorf("admission %+v, want allowed", r.Admission)
	}
	trouble := r.Plan.Summary.NotFit > 0 || r.Plan.Summary.Preempting > 0
	if want := map[bool]int{false: 0, true: 3}[trouble]; doc.ExitCode != want {
		t.Errorf("exit code %d, want %d (summary %+v)", doc.ExitCode, want, r.Plan.Summary)
	}
	return r
}

// runPlan runs the command as main does and returns its stdout.
func runPlan(kubeconfig, ns, file string) (string, error) {
	cmd := cli.New()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"rollout", "plan", "-f", file, "-o", "json", "--kubeconfig", kubeconfig, "-n", ns,
		// The harness registers the webhook by URL: no Service names its namespace.
		"--daemonguard-namespace", harness.WebhookNamespace})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func ownedBy(p *corev1.Pod, ds *appsv1.DaemonSet) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.UID == ds.UID
}

// podNode is the node a pod is bound to, or for a daemon pod not yet bound the node the DaemonSet
// controller pinned it to.
func podNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// unschedulable says the scheduler tried the pod and found no place for it.
func unschedulable(p *corev1.Pod) bool {
	return p.Spec.NodeName == "" && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
	})
}
