package preflight

import (
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	schedulinghelpers "k8s.io/component-helpers/scheduling/corev1"
)

// FitResult is whether the new daemon pod can run on its node, and at whose expense.
type FitResult struct {
	// Schedulable is false when the pod stays Pending: it does not fit, and preempting every
	// lower-priority pod would not make it fit (or it may not preempt).
	Schedulable bool `json:"schedulable"`
	// Insufficient names each resource the node lacks, with what the pod asks and what is free.
	Insufficient []string `json:"insufficient,omitempty"`
	// HostPortConflicts names the pods that hold a host port the new pod needs.
	HostPortConflicts []string `json:"hostPortConflicts,omitempty"`
	// Preempts are the pods the scheduler evicts so the new pod runs.
	Preempts []Victim `json:"preempts,omitempty"`
}

// Victim is a pod preempted for the new one.
type Victim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Priority  int32  `json:"priority"`
	// Budget names the PodDisruptionBudget the eviction goes beyond: the scheduler spares such
	// pods first, but preempts them when nothing else makes room.
	Budget string `json:"budget,omitempty"`
}

func (v Victim) String() string {
	if v.Budget != "" {
		return fmt.Sprintf("%s/%s (priority %d, beyond PodDisruptionBudget %s)", v.Namespace, v.Name, v.Priority, v.Budget)
	}
	return fmt.Sprintf("%s/%s (priority %d)", v.Namespace, v.Name, v.Priority)
}

// Fit is the scheduler's verdict for the daemon pod on its node (the DaemonSet's pods are pinned
// to one node each, so that node is the only candidate): the NodeResourcesFit and NodePorts
// filters against the pods bound there, then, when they fail, DefaultPreemption's victim
// selection on that node, with the cluster's PodDisruptionBudgets.
//
// Assumptions:
//   - The pod already passed node affinity and taints: the DaemonSet controller creates it only
//     on nodes it should run on.
//   - Resource requests are counted as the pods declare them (with overhead); in-place resizes
//     under way and dynamic resources are not modelled.
//
// Invariants:
//   - A pod is a victim only if its priority is lower than the new pod's.
//   - Victims are chosen as upstream's SelectVictimsOnNode does: remove every lower-priority pod;
//     if the pod still does not fit, it cannot preempt; else put back first the pods whose
//     eviction would go beyond a PodDisruptionBudget, then the others, each group the most
//     important first (higher priority, then earlier start), whenever the pod still fits. A
//     budget therefore changes which pods are victims, not whether the pod can preempt.
func Fit(pod *corev1.Pod, node *corev1.Node, others []*corev1.Pod, budgets ...*policyv1.PodDisruptionBudget) FitResult {
	insufficient, conflicts := fits(pod, node, others)
	r := FitResult{Schedulable: len(insufficient) == 0 && len(conflicts) == 0, Insufficient: insufficient, HostPortConflicts: conflicts}
	if r.Schedulable {
		return r
	}
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return r
	}
	prio := schedulinghelpers.PodPriority(pod)
	var kept, candidates []*corev1.Pod
	for _, p := range others {
		if schedulinghelpers.PodPriority(p) < prio {
			candidates = append(candidates, p)
		} else {
			kept = append(kept, p)
		}
	}
	if len(candidates) == 0 {
		return r
	}
	if in, c := fits(pod, node, kept); len(in) > 0 || len(c) > 0 {
		return r // even without every lower-priority pod it does not fit
	}
	sort.SliceStable(candidates, func(i, j int) bool { return moreImportant(candidates[i], candidates[j]) })
	beyond := beyondBudget(candidates, budgets)
	var victims []*corev1.Pod
	for _, protected := range []bool{true, false} {
		for _, p := range candidates {
			if (beyond[p] != "") != protected {
				continue
			}
			if in, c := fits(pod, node, append(kept, p)); len(in) == 0 && len(c) == 0 {
				kept = append(kept, p)
				continue
			}
			victims = append(victims, p)
		}
	}
	sort.SliceStable(victims, func(i, j int) bool { return moreImportant(victims[i], victims[j]) })
	for _, p := range victims {
		r.Preempts = append(r.Preempts, Victim{Namespace: p.Namespace, Name: p.Name, Priority: schedulinghelpers.PodPriority(p), Budget: beyond[p]})
	}
	r.Schedulable = true
	return r
}

// beyondBudget is upstream's filterPodsWithPDBViolation: going through pods in order, each
// takes one disruption from every budget that selects it (unless the budget already counts it
// as disrupted); a pod that takes one a budget does not have is mapped to that budget's name.
func beyondBudget(pods []*corev1.Pod, budgets []*policyv1.PodDisruptionBudget) map[*corev1.Pod]string {
	out := map[*corev1.Pod]string{}
	allowed := make([]int32, len(budgets))
	for i, b := range budgets {
		allowed[i] = b.Status.DisruptionsAllowed
	}
	for _, p := range pods {
		if len(p.Labels) == 0 {
			continue
		}
		for i, b := range budgets {
			if b.Namespace != p.Namespace {
				continue
			}
			sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(p.Labels)) {
				continue // an invalid, nil or empty selector matches nothing
			}
			if _, disrupted := b.Status.DisruptedPods[p.Name]; disrupted {
				continue
			}
			if allowed[i]--; allowed[i] < 0 {
				out[p] = b.Name
			}
		}
	}
	return out
}

// fits runs NodeResourcesFit and NodePorts for pod on node next to others: the resources the
// node lacks and the pods holding a host port the pod needs.
func fits(pod *corev1.Pod, node *corev1.Node, others []*corev1.Pod) (insufficient, conflicts []string) {
	alloc := node.Status.Allocatable
	if max, ok := alloc[corev1.ResourcePods]; ok && int64(len(others)+1) > max.Value() {
		insufficient = append(insufficient, fmt.Sprintf("pods: %d of %d already run", len(others), max.Value()))
	}
	want := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	used := corev1.ResourceList{}
	for _, p := range others {
		for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
			sum := used[name]
			sum.Add(q)
			used[name] = sum
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, string(name))
	}
	sort.Strings(names)
	for _, n := range names {
		name := corev1.ResourceName(n)
		q := want[name]
		if q.IsZero() || name == corev1.ResourcePods {
			continue
		}
		total := alloc[name]
		free := total.DeepCopy()
		u := used[name]
		free.Sub(u)
		if q.Cmp(free) > 0 {
			shown := nonNegative(free)
			insufficient = append(insufficient, fmt.Sprintf("%s: asks %s, %s free of %s", name, q.String(), shown.String(), total.String()))
		}
	}
	for _, hp := range hostPorts(pod) {
		for _, p := range others {
			for _, other := range hostPorts(p) {
				if hp.conflicts(other) {
					conflicts = append(conflicts, fmt.Sprintf("%s/%s holds %s", p.Namespace, p.Name, other))
				}
			}
		}
	}
	return insufficient, conflicts
}

func nonNegative(q resource.Quantity) resource.Quantity {
	if q.Sign() < 0 {
		return resource.Quantity{Format: q.Format}
	}
	return q
}

type hostPort struct {
	ip, protocol string
	port         int32
}

func (h hostPort) String() string {
	return fmt.Sprintf("host port %s %s:%d", h.protocol, h.ip, h.port)
}

// conflicts is the NodePorts filter's rule: the same protocol and port, on the same IP or where
// either listens on every address.
func (h hostPort) conflicts(o hostPort) bool {
	return h.port == o.port && h.protocol == o.protocol && (h.ip == o.ip || h.ip == "0.0.0.0" || o.ip == "0.0.0.0")
}

// hostPorts are the host ports of the pod's containers and restartable init containers, IP and
// protocol defaulted as the scheduler does.
func hostPorts(pod *corev1.Pod) []hostPort {
	var out []hostPort
	add := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			h := hostPort{ip: p.HostIP, protocol: string(p.Protocol), port: p.HostPort}
			if h.ip == "" {
				h.ip = "0.0.0.0"
			}
			if h.protocol == "" {
				h.protocol = string(corev1.ProtocolTCP)
			}
			out = append(out, h)
		}
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return out
}

// moreImportant is upstream's MoreImportantPod: higher priority, then the earlier start (a pod
// not started yet counts as starting last).
func moreImportant(a, b *corev1.Pod) bool {
	if pa, pb := schedulinghelpers.PodPriority(a), schedulinghelpers.PodPriority(b); pa != pb {
		return pa > pb
	}
	return startTime(a).Before(startTime(b))
}

func startTime(p *corev1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return notStarted
}

var notStarted = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
