package scalebench

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// shape is the cluster one measurement runs on: how many nodes, how full, and how much the
// audit and the review measurements do.
type shape struct {
	nodes int
	// podsPerNode counts every pod on a node: the platform DaemonSets' and the workloads'.
	podsPerNode int
	// auditDaemonSets are DaemonSets the audit evaluates that select no node (they create no pod).
	auditDaemonSets int
	// reviews is how many DaemonSet writes the review latency is measured over.
	reviews int
}

const (
	// platformNamespace holds the node agents: labelled for daemonguard's injection.
	platformNamespace = "platform"
	// teams are the workload namespaces, each with its workloads, PDBs and audited DaemonSets.
	teams = 20
	// groupSize is the number of pods of each workload (one PodDisruptionBudget each).
	groupSize = 100
	// zones the nodes are spread over.
	zones = 5
	// noNode is a node label no node carries: the audited DaemonSets select it, so they are
	// stored and audited but run no pod.
	noNode = "scalebench.daemonguard.io/never"
)

// agents are the platform DaemonSets, each with a pod on every node. builtinAgent and
// managedAgent roll out with the same budget; the others make the nodes' occupancy.
var agents = []agent{
	{name: builtinAgent, strategy: "RollingUpdate"},
	{name: managedAgent, strategy: "OnDelete", managed: true},
	{name: "cni", strategy: "RollingUpdate"},
	{name: "csi-node", strategy: "OnDelete"},
}

const (
	builtinAgent = "logs"
	managedAgent = "metrics"
	// budget is both rollouts' maxUnavailable.
	budget = "10%"
)

type agent struct {
	name, strategy string
	managed        bool
}

// priorityClasses are the platform's: node agents above services above batch work.
var priorityClasses = map[string]int32{"platform-agent": 100000, "service": 1000, "batch": -10}

// workloadPriority is the priority class of the i-th workload: most services, some batch,
// some with none.
func workloadPriority(i int) string {
	return []string{"service", "service", "batch", ""}[i%4]
}

// daemonSet is a platform DaemonSet at image.
func (a agent) daemonSet(image string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: platformNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": a.name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": a.name}},
				Spec: corev1.PodSpec{
					PriorityClassName: "platform-agent",
					Containers: []corev1.Container{{Name: "agent", Image: image, Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
					}}},
				},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.DaemonSetUpdateStrategyType(a.strategy)},
		},
	}
	if a.strategy == "RollingUpdate" {
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString(budget))}
	}
	if a.managed {
		ds.Annotations = map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged, rolloutapi.AnnotationMaxUnavailable: budget}
	}
	return ds
}

// auditedDaemonSet is the i-th DaemonSet of the audit: it selects no node; every tenth asks for
// a budget that admission allows and tightenBudget's policy does not, so the audit finds
// violations to report.
func auditedDaemonSet(i int) *appsv1.DaemonSet {
	name := fmt.Sprintf("audited-%04d", i)
	maxUnavailable := "1"
	if i%10 == 0 {
		maxUnavailable = "40%"
	}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team(i)},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{noNode: "true"},
					Containers:   []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
				},
			},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.Parse(maxUnavailable))}},
		},
	}
}

func team(i int) string { return fmt.Sprintf("team-%02d", i%teams) }

// scaleNodes are n workers over the zones.
func scaleNodes(n int) []localcluster.Node {
	names := make([]string, zones)
	for i := range names {
		names[i] = fmt.Sprintf("zone-%c", 'a'+i)
	}
	return localcluster.WorkerNodes("node", n, names...)
}

// populate gives a started cluster of s.nodes nodes its occupancy and returns how many pods it
// holds: the priority classes, the platform DaemonSets running on every node, then per node the
// workloads' pods, created bound to their nodes by the benchmark (the scheduler would otherwise
// spend minutes on pods no measurement is about), and a PodDisruptionBudget per workload. The
// audited DaemonSets come last, with addAudited.
func populate(t testing.TB, c *localcluster.Cluster, s shape) int {
	ctx := context.Background()
	for name, value := range priorityClasses {
		if _, err := c.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: platformNamespace, Labels: map[string]string{admission.NodeAgentsLabel: "true"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range teams {
		if err := c.CreateNamespace(ctx, team(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range agents {
		if _, err := c.Client.AppsV1().DaemonSets(platformNamespace).Create(ctx, a.daemonSet("agent:1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for _, a := range agents {
		waitDaemonSet(t, c, a.name, s.nodes, "agent:1", false, 30*time.Minute)
	}
	logf(t, "%d DaemonSets on %d nodes in %s", len(agents), s.nodes, time.Since(start).Round(time.Second))
	start = time.Now()

	perNode := s.podsPerNode - len(agents)
	groups := s.nodes * perNode / groupSize
	if s.nodes*perNode%groupSize != 0 {
		t.Fatalf("%d nodes × %d workload pods is not a whole number of workloads of %d pods", s.nodes, perNode, groupSize)
	}
	client := protobufClient(t, c)
	// Pod k of all the workloads' pods runs on node k mod nodes: every node gets perNode pods,
	// each from a different workload where possible.
	parallel(t, groups*groupSize, 64, func(k int) error {
		group := k / groupSize
		_, err := client.CoreV1().Pods(team(group)).Create(ctx, workloadPod(group, k, fmt.Sprintf("node-%d", k%s.nodes)), metav1.CreateOptions{})
		return err
	})
	logf(t, "%d workload pods created in %s", groups*groupSize, time.Since(start).Round(time.Second))
	start = time.Now()
	// The budgets come once the pods exist: the disruption controller then computes each once,
	// instead of on every pod's creation.
	parallel(t, groups, 16, func(group int) error {
		_, err := client.PolicyV1().PodDisruptionBudgets(team(group)).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: groupName(group)},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MinAvailable: ptr.To(intstr.FromInt32(groupSize * 9 / 10)),
				Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": groupName(group)}},
			},
		}, metav1.CreateOptions{})
		return err
	})
	logf(t, "%d PodDisruptionBudgets created in %s", groups, time.Since(start).Round(time.Second))
	start = time.Now()
	waitObserved(t, c)
	logf(t, "every DaemonSet and PodDisruptionBudget observed by its controller in %s", time.Since(start).Round(time.Second))
	return s.nodes * s.podsPerNode
}

// addAudited creates the audited DaemonSets once the DaemonSet controller is stopped (see
// runScale). Its first syncs of 2,000 DaemonSets, each checking every node, take minutes at 1,000
// nodes and most of an hour at 5,000 on 2 cores, and would take the CPU the audit is measured on;
// the audit reads the DaemonSets' specs, not what the DaemonSet controller writes.
func addAudited(t testing.TB, c *localcluster.Cluster, s shape) {
	t.Helper()
	start := time.Now()
	client := protobufClient(t, c)
	parallel(t, s.auditDaemonSets, 16, func(i int) error {
		_, err := client.AppsV1().DaemonSets(team(i)).Create(context.Background(), auditedDaemonSet(i), metav1.CreateOptions{})
		return err
	})
	logf(t, "%d audited DaemonSets created in %s", s.auditDaemonSets, time.Since(start).Round(time.Second))
}

// tightenedBudget is the rolling_update_budget maximum tightenBudget sets: below the 40% every
// tenth audited DaemonSet asks for, above the platform DaemonSets' 10%.
const tightenedBudget = 30

// tightenBudget lowers rolling_update_budget's maximum for the workload namespaces with a policy
// ConfigMap in daemonguard's namespace, as a platform team would in git. Admission denies a
// DaemonSet that breaks a policy, so the audit's findings are the DaemonSets a policy change
// left behind.
func tightenBudget(t testing.TB, c *localcluster.Cluster, namespace string) {
	t.Helper()
	params := fmt.Sprintf("policies:\n  rolling_update_budget:\n    default:\n      maxUnavailablePercent: %d\n", tightenedBudget)
	if _, err := c.Client.CoreV1().ConfigMaps(namespace).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "tightened-budget", Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}},
		Data:       map[string]string{"parameters.yaml": params},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// protobufClient talks protobuf, as the control plane's own clients do: the API server decodes
// 150,000 creates faster than as JSON.
func protobufClient(t testing.TB, c *localcluster.Cluster) *kubernetes.Clientset {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.ContentType, cfg.AcceptContentTypes = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// waitObserved waits until the DaemonSet controller has synced every DaemonSet and the disruption
// controller every budget (status.observedGeneration), so that a measurement after it does not
// wait behind their first syncs.
func waitObserved(t testing.TB, c *localcluster.Cluster) {
	t.Helper()
	c.WaitFor(t, 60*time.Minute, "every DaemonSet and PodDisruptionBudget observed", func(ctx context.Context) (bool, string) {
		daemonSets, err := c.Client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		budgets, err := c.Client.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		behind := 0
		for _, ds := range daemonSets.Items {
			if ds.Status.ObservedGeneration != ds.Generation {
				behind++
			}
		}
		for _, pdb := range budgets.Items {
			if pdb.Status.ObservedGeneration != pdb.Generation {
				behind++
			}
		}
		return behind == 0, fmt.Sprintf("%d of %d DaemonSets and budgets not observed yet", behind, len(daemonSets.Items)+len(budgets.Items))
	})
}

func groupName(group int) string { return fmt.Sprintf("svc-%04d", group) }

// workloadPod is the k-th workload pod, of workload group, bound to node and left Pending by
// kwok (see settings for why, and without a ReplicaSet).
func workloadPod(group, k int, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:   fmt.Sprintf("%s-%06d", groupName(group), k),
			Labels: map[string]string{"app": groupName(group), "tier": []string{"web", "api", "worker"}[group%3], localcluster.UnstartedLabel: "true"},
		},
		Spec: corev1.PodSpec{
			NodeName:          node,
			PriorityClassName: workloadPriority(group),
			Containers: []corev1.Container{{
				Name: "app", Image: fmt.Sprintf("registry.example/%s:1", groupName(group)),
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}},
				Env:   []corev1.EnvVar{{Name: "TEAM", Value: team(group)}, {Name: "LOG_LEVEL", Value: "info"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("48Mi"),
				}},
			}},
		},
	}
}

// parallel runs do(0..n-1) on workers goroutines and fails the test with the first errors.
func parallel(t testing.TB, n, workers int, do func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	var errs []string
	var wg sync.WaitGroup
	for range min(workers, max(n, 1)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					mu.Lock()
					errs = append(errs, err.Error())
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d failed, first: %s", len(errs), n, strings.Join(errs[:min(3, len(errs))], "; "))
	}
}

// waitDaemonSet waits until the platform DaemonSet name runs image, updated and available, on
// want nodes (and, managed, reports its rollout Complete).
func waitDaemonSet(t testing.TB, c *localcluster.Cluster, name string, want int, image string, managed bool, timeout time.Duration) {
	t.Helper()
	clustertest.WaitDaemonSet(t, c, platformNamespace, name, timeout, fmt.Sprintf("DaemonSet %s at %s on %d nodes", name, image, want),
		clustertest.RolledOut(image, want, managed))
}
