package rollout

import (
	"slices"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Facts is what one reconcile of a managed DaemonSet read, in one step: plain data, no client.
type Facts struct {
	Now time.Time // the reconcile's one reading of the clock
	// DaemonSet is as read: its annotations and conditions are the last report.
	DaemonSet *appsv1.DaemonSet
	Settings  rolloutapi.Settings
	// SettingsErr is set when the settings annotations do not parse; nothing more is read.
	SettingsErr error
	// Status is the status annotations decoded; a malformed value is left out, and the rollout
	// resumes as if it had not been written.
	Status rolloutapi.Status
	// TargetRevision is the controller-revision-hash of the current template; "" while unknown,
	// and then Pods and Nodes are not read.
	TargetRevision string
	// Pods are the DaemonSet's pods and Nodes every node, shared with the cache: read only.
	Pods  []*corev1.Pod
	Nodes []*corev1.Node
	// Deleted holds the pods this process deleted, and when, until the cache shows them
	// terminating or gone: they count as terminating even while the cache lags.
	Deleted map[types.UID]time.Time
	// LastReport is when this process last reported the DaemonSet's progress; zero if never.
	LastReport time.Time
}

// Decision is every write of one reconcile, decided from Facts alone; apply performs it.
type Decision struct {
	Plan        *Plan                       // the rollout plan; nil when there was nothing to plan
	Annotations map[string]*string          // status annotation changes (nil removes); empty: none
	Conditions  []appsv1.DaemonSetCondition // the DaemonSet's new conditions; nil: unchanged
	Event       *Event                      // the Event to record; nil: none
	// Reported says the progress report is written now: apply records Facts.Now as the last one.
	Reported     bool
	RequeueAfter time.Duration
}

// Event is a rollout Event on the DaemonSet; the planner words it (Plan.Event).
type Event struct {
	Type, Reason, Note string
	// FailureReason, when set, counts the Event in daemonguard_rollout_failures_total.
	FailureReason string
}

// reportInterval bounds how often progress counts are written while nothing else changes.
const reportInterval = time.Second

// revisionPending is how soon to look again while the current template's revision is unknown:
// the DaemonSet controller creates it within moments of observing a new generation.
const revisionPending = time.Second

// Decide turns the facts of one reconcile into its writes: it classifies the nodes and pods
// (plannerInput), plans (BuildPlan) and decides what of the plan to report now.
//
// Invariants:
//   - Settings that do not parse set the Failed condition (InvalidSettings, with a message that
//     says what to do) and nothing else: no pod is deleted, no Event is recorded, and the status
//     annotations, the controller's memory, are kept.
//   - Pods are deleted as the plan says, whether or not the report is written now.
//   - A transition (another phase, reason, step or target revision than the DaemonSet shows) is
//     reported at once, with the plan's Event, whose reason and message are the condition's.
//     Without one, only counts moved: on a 1,000-node rollout every pod event would otherwise
//     cost two writes to the API server the rollout itself is waiting on, so the report is
//     written at most once per reportInterval, and the reconcile comes back after
//     reportInterval to flush it.
//   - Annotations and conditions are written only where they differ from the DaemonSet's.
func Decide(f Facts) Decision {
	annotations, conditions := f.DaemonSet.Annotations, f.DaemonSet.Status.Conditions
	if f.SettingsErr != nil {
		// Admitted while the webhook was bypassed: report, do nothing until it is fixed.
		return Decision{Conditions: rolloutConditions(conditions, rolloutapi.PhaseFailed, rolloutapi.ReasonInvalidSettings, InvalidSettingsMessage(f.SettingsErr), f.Now)}
	}
	if f.TargetRevision == "" {
		return Decision{RequeueAfter: revisionPending}
	}
	in := plannerInput(f)
	plan := BuildPlan(in)
	d := Decision{Plan: &plan}

	previous := activeCondition(conditions)
	transition := previous == nil || string(previous.Type) != string(plan.Phase) || previous.Reason != plan.Reason ||
		annotations[rolloutapi.StatusStep] != plan.Status.Step.String() || annotations[rolloutapi.StatusRevision] != plan.Status.Revision
	if !transition && f.Now.Sub(f.LastReport) < reportInterval {
		d.RequeueAfter = reportInterval
		return d
	}
	d.Reported = true
	d.Annotations = rolloutapi.StatusChanges(annotations, plan.Status)
	d.Conditions = rolloutConditions(conditions, plan.Phase, plan.Reason, plan.Message, f.Now)
	if transition {
		d.Event = &plan.Event
	}
	d.RequeueAfter = plan.RequeueAfter
	if minReady := time.Duration(in.MinReadySeconds) * time.Second; plan.Phase == rolloutapi.PhaseProgressing && minReady > 0 &&
		(d.RequeueAfter == 0 || minReady < d.RequeueAfter) {
		// A new pod becomes available MinReadySeconds after it is Ready, with no event to say so.
		d.RequeueAfter = minReady
	}
	return d
}

// InvalidSettingsMessage is the Failed message for settings annotations that do not parse: what
// is wrong, and what to do. Nothing is replaced until they are fixed; a new template does not
// help.
func InvalidSettingsMessage(err error) string {
	return err.Error() + "; no pods are replaced until the annotation is fixed: correct it in the manifest and apply it"
}

// activeCondition is the True rollout condition of conds, nil when there is none.
func activeCondition(conds []appsv1.DaemonSetCondition) *appsv1.DaemonSetCondition {
	for i := range conds {
		c := &conds[i]
		if isRolloutCondition(c.Type) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func isRolloutCondition(t appsv1.DaemonSetConditionType) bool {
	return slices.Contains(rolloutapi.RolloutConditions, t)
}

// rolloutConditions makes the phase's condition the one True rollout condition of conds, keeping
// conditions of other owners; nil when conds already say so. conds is not modified.
func rolloutConditions(conds []appsv1.DaemonSetCondition, phase rolloutapi.Phase, reason, message string, now time.Time) []appsv1.DaemonSetCondition {
	out := append([]appsv1.DaemonSetCondition(nil), conds...)
	changed := false
	for _, t := range rolloutapi.RolloutConditions {
		status, r1, m1 := corev1.ConditionFalse, "", ""
		if string(t) == string(phase) {
			status, r1, m1 = corev1.ConditionTrue, reason, message
		}
		idx := -1
		for i := range out {
			if out[i].Type == t {
				idx = i
			}
		}
		if idx < 0 {
			out = append(out, appsv1.DaemonSetCondition{Type: t, Status: status, Reason: r1, Message: m1, LastTransitionTime: metav1.NewTime(now)})
			changed = true
			continue
		}
		c := &out[idx]
		if c.Status != status {
			c.Status, c.LastTransitionTime = status, metav1.NewTime(now)
			changed = true
		}
		if c.Reason != r1 || c.Message != m1 {
			c.Reason, c.Message = r1, m1
			changed = true
		}
	}
	if !changed {
		return nil
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out
}

// failureReasons are container waiting reasons that do not fix themselves without a new template.
var failureReasons = map[string]bool{
	"ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
}

// plannerInput classifies what the reconcile read into the planner's input: the nodes the
// DaemonSet should run on (eligible), whether each is reachable, and each pod's revision,
// readiness and failure.
func plannerInput(f Facts) Input {
	ds := f.DaemonSet
	in := Input{
		Name: ds.Name, Namespace: ds.Namespace,
		TargetRevision:  f.TargetRevision,
		Settings:        f.Settings,
		MinReadySeconds: ds.Spec.MinReadySeconds,
		Status:          f.Status,
		Now:             f.Now,
	}
	if c := activeCondition(ds.Status.Conditions); c != nil && c.Type == rolloutapi.ConditionFailed {
		in.PreviousFailure = c.Reason
	}
	// A node's pods start as a one-element window of states, so the usual node with one pod
	// costs no allocation of its own; a second pod appends past the window into a new array.
	// On 1,000 nodes this halved the allocations of a reconcile, and of each step of
	// ForecastRollout, which runs the planner about twice per node.
	podsByNode := make(map[string][]PodState, len(f.Nodes))
	states := make([]PodState, len(f.Pods))
	for i, p := range f.Pods {
		if nodeName := nodes.OfPod(p); nodeName != "" {
			states[i] = podState(p, f.Deleted)
			if onNode, ok := podsByNode[nodeName]; ok {
				podsByNode[nodeName] = append(onNode, states[i])
			} else {
				podsByNode[nodeName] = states[i : i+1 : i+1]
			}
		}
	}
	matcher := nodes.NewMatcher(&ds.Spec.Template.Spec)
	in.Nodes = make([]NodeState, 0, len(f.Nodes))
	for _, n := range f.Nodes {
		if !eligible(matcher, n) {
			continue
		}
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		in.Nodes = append(in.Nodes, NodeState{
			Name: n.Name, ControlPlane: cp, Reachable: reachable(n),
			Domain: topologyDomain(n, f.Settings.TopologyKey), Pods: podsByNode[n.Name],
		})
	}
	return in
}

// podState is what the planner knows of p; a pod in deleted counts as terminating since then.
func podState(p *corev1.Pod, deleted map[types.UID]time.Time) PodState {
	s := PodState{Name: p.Name, UID: string(p.UID), Revision: p.Labels[revisionLabel]}
	if p.DeletionTimestamp != nil {
		s.Terminating, s.DeletedAt = true, p.DeletionTimestamp.Time
	} else if at, ok := deleted[p.UID]; ok {
		s.Terminating, s.DeletedAt = true, at
	}
	s.NotReadySince = p.CreationTimestamp.Time
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			s.Ready, s.ReadySince, s.NotReadySince = true, c.LastTransitionTime.Time, time.Time{}
		} else if !c.LastTransitionTime.IsZero() {
			s.NotReadySince = c.LastTransitionTime.Time
		}
	}
	for _, list := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
		for i := range list {
			if w := list[i].State.Waiting; w != nil && failureReasons[w.Reason] {
				s.Failure = w.Reason
			}
		}
	}
	return s
}

// eligible is the DaemonSet controller's "should continue running" (NodeShouldRunDaemonPod): the
// not-ready and unreachable NoSchedule taints of the node lifecycle controller keep new daemon pods
// off a node but not the pod it has, so such a node still belongs to the rollout. It is then
// left out as unreachable and reported, not silently dropped.
func eligible(m *nodes.Matcher, n *corev1.Node) bool {
	if m.Eligible(n) {
		return true
	}
	var kept []corev1.Taint
	for _, t := range n.Spec.Taints {
		if t.Key != corev1.TaintNodeUnreachable && t.Key != corev1.TaintNodeNotReady {
			kept = append(kept, t)
		}
	}
	if len(kept) == len(n.Spec.Taints) {
		return false
	}
	healthy := *n
	healthy.Spec.Taints = kept
	return m.Eligible(&healthy)
}

// reachable is false when the node is not Ready or carries the unreachable or not-ready taint.
func reachable(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeUnreachable || t.Key == corev1.TaintNodeNotReady {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func topologyDomain(n *corev1.Node, key string) string {
	if key == "" {
		return ""
	}
	return n.Labels[key]
}
