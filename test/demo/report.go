package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulinghelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Placement is where one DaemonSet stands on one node, and why.
type Placement struct {
	Node   string
	Role   string // "control-plane" or "worker"
	Zone   string
	Pod    string // empty when the node has no pod of the DaemonSet
	Status string // pod phase and readiness, or why the node has no pod
}

// DaemonSetReport is what the demo prints about one DaemonSet.
type DaemonSetReport struct {
	Namespace, Name                              string
	Desired, Current, Ready, UpToDate, Available int32 // as in `kubectl get ds`
	Nodes                                        int   // nodes in the cluster
	Running                                      int   // nodes with a running, ready pod
	Placements                                   []Placement
	Tolerations                                  []string // of the stored template
	PriorityClassName                            string   // of the stored template
	PodPriorities                                []int32  // distinct spec.priority of the pods
}

// BuildReport explains, for every node, whether ds has a pod there and if not, why: a taint the
// template does not tolerate, or a node selector/affinity that excludes the node. It is pure, so the
// wording is table-tested without a cluster.
func BuildReport(ds *appsv1.DaemonSet, nodes []corev1.Node, pods []corev1.Pod) DaemonSetReport {
	podOnNode := map[string]*corev1.Pod{}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			podOnNode[p.Spec.NodeName] = p
		}
	}
	r := DaemonSetReport{
		Namespace: ds.Namespace, Name: ds.Name,
		Desired: ds.Status.DesiredNumberScheduled, Current: ds.Status.CurrentNumberScheduled,
		Ready: ds.Status.NumberReady, UpToDate: ds.Status.UpdatedNumberScheduled,
		Available: ds.Status.NumberAvailable, Nodes: len(nodes),
	}
	for _, t := range ds.Spec.Template.Spec.Tolerations {
		r.Tolerations = append(r.Tolerations, tolerationString(t))
	}
	r.PriorityClassName = ds.Spec.Template.Spec.PriorityClassName
	seen := map[int32]bool{}
	for i := range pods {
		if p := pods[i].Spec.Priority; p != nil && !seen[*p] {
			seen[*p] = true
			r.PodPriorities = append(r.PodPriorities, *p)
		}
	}
	sort.Slice(r.PodPriorities, func(i, j int) bool { return r.PodPriorities[i] < r.PodPriorities[j] })
	sorted := append([]corev1.Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for i := range sorted {
		n := &sorted[i]
		pl := Placement{Node: n.Name, Role: "worker", Zone: n.Labels[localcluster.ZoneLabel]}
		if _, ok := n.Labels[localcluster.ControlPlaneLabel]; ok {
			pl.Role = "control-plane"
		}
		if p, ok := podOnNode[n.Name]; ok {
			pl.Pod = p.Name
			pl.Status = podStatus(p)
			if pl.Status == runningReady {
				r.Running++
			}
		} else {
			pl.Status = "no pod: " + whyNoPod(&ds.Spec.Template.Spec, n)
		}
		r.Placements = append(r.Placements, pl)
	}
	return r
}

// tolerationString writes a toleration the way kubectl describe does: key[=value]:effect, with
// "op=Exists" for Exists.
func tolerationString(t corev1.Toleration) string {
	s := t.Key
	if t.Operator == corev1.TolerationOpExists {
		s += " op=Exists"
	} else if t.Value != "" {
		s += "=" + t.Value
	}
	if t.Effect != "" {
		s = strings.TrimSpace(s) + ":" + string(t.Effect)
	}
	return s
}

const runningReady = "Running, ready"

func podStatus(p *corev1.Pod) string {
	ready := "not ready"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			ready = "ready"
		}
	}
	phase := string(p.Status.Phase)
	if phase == "" {
		phase = "Pending"
	}
	return phase + ", " + ready
}

// whyNoPod mirrors the DaemonSet controller's eligibility test: the template must tolerate every
// NoSchedule/NoExecute taint and its node selector and required affinity must match the node.
func whyNoPod(spec *corev1.PodSpec, n *corev1.Node) string {
	for i := range n.Spec.Taints {
		t := &n.Spec.Taints[i]
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !schedulinghelpers.TolerationsTolerateTaint(logr.Discard(), spec.Tolerations, t, false) {
			return fmt.Sprintf("taint %s:%s not tolerated by the pod template", t.Key, t.Effect)
		}
	}
	pod := &corev1.Pod{Spec: *spec}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(n); !ok {
		return "excluded by the template's nodeSelector or node affinity"
	}
	return "eligible, pod not created yet"
}

// Render prints reports for a person reading a terminal: one summary line per DaemonSet with the
// same five numbers as `kubectl get ds`, then one line per node.
func Render(w io.Writer, reports []DaemonSetReport) error {
	var b strings.Builder
	for _, r := range reports {
		fmt.Fprintf(&b, "DaemonSet %s/%s runs on %d of %d nodes (desired %d, current %d, ready %d, up-to-date %d, available %d)\n",
			r.Namespace, r.Name, r.Running, r.Nodes, r.Desired, r.Current, r.Ready, r.UpToDate, r.Available)
		if len(r.Tolerations) > 0 {
			fmt.Fprintf(&b, "  template tolerations: %s\n", strings.Join(r.Tolerations, ", "))
		}
		if r.PriorityClassName != "" {
			fmt.Fprintf(&b, "  template priorityClassName: %s (pod priority %v)\n", r.PriorityClassName, r.PodPriorities)
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  NODE\tROLE\tZONE\tPOD\tSTATUS")
		for _, p := range r.Placements {
			pod := p.Pod
			if pod == "" {
				pod = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Node, p.Role, p.Zone, pod, p.Status)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
