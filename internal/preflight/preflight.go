// Package preflight is `daemonguard rollout plan`: what a DaemonSet change will do before it is
// applied, gathered, decided and rendered in files named for their jobs. command.go is the
// command (NewPlanCommand) and its run, one Report per DaemonSet (PlanManifests) and the exit
// status (ExitStatus); gather.go reads the cluster's objects once, daemonguard's webhooks and
// policy set among them; admission.go merges each manifest into the live DaemonSet as kubectl
// apply does and runs admission through daemonguard's admission core as the cluster would;
// analysis.go runs a managed DaemonSet's analysis gates once through the controller's Prometheus
// client (internal/promquery) and judges them with the rollout's own judgement
// (rolloutanalysis.Judge); render.go writes the reports as a table, markdown or JSON (Render).
// The decisions are pure, over plain data and a clock: preflight.go decides node by node which
// nodes gain, lose or replace the daemon pod and why, and which template fields change (Assess,
// an Impact); fit.go whether the new pod fits or preempts (Fit); rollout.go how the rollout
// proceeds, for managed DaemonSets with the controller's own planner (rolloutplan.Forecast).
package preflight

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Snapshot is everything Assess needs.
type Snapshot struct {
	// After is the DaemonSet as the API server would store it: merged with the live object and
	// mutated by admission.
	After *appsv1.DaemonSet
	// Live is the DaemonSet in the cluster today; nil when the change creates it.
	Live *appsv1.DaemonSet
	// NewRevision says After's pod template differs from Live's: pods are replaced. Always true
	// on create.
	NewRevision bool
	Nodes       []*corev1.Node
	// Pods are the pods bound to nodes, of every namespace, that have not finished.
	Pods []*corev1.Pod
	// Budgets are the PodDisruptionBudgets of every namespace: they change which pods the
	// scheduler preempts.
	Budgets []*policyv1.PodDisruptionBudget
	// DaemonPods are Live's pods.
	DaemonPods []*corev1.Pod
	// Priority and PreemptionPolicy of After's pods, as admission resolves them from the
	// PriorityClass.
	Priority         int32
	PreemptionPolicy corev1.PreemptionPolicy
	// ReadyAfter is how long a pod of this DaemonSet took from creation to Ready (the median of
	// its ready pods); ReadyKnown is false when no pod says.
	ReadyAfter time.Duration
	ReadyKnown bool
	// Problems stop every new pod whatever the node (a priority class that does not exist).
	Problems []string
	Now      time.Time
}

// Change is what happens to one node.
type Change string

// The changes, from the node's point of view.
const (
	Gains     Change = "gains"     // no daemon pod today, one after
	Loses     Change = "loses"     // a daemon pod today, none after
	Replaced  Change = "replaced"  // the pod is replaced by one of the new revision
	Unchanged Change = "unchanged" // the pod stays as it is
	Keeps     Change = "keeps"     // the old pod keeps running, but is not recreated once deleted
	None      Change = "none"      // no daemon pod, today or after
)

// Impact is what applying a DaemonSet change does: node by node, summed, and the rollout.
type Impact struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Operation is "create" or "update".
	Operation string `json:"operation"`
	// NewRevision is false when the pod template does not change: no pod is touched.
	NewRevision bool `json:"newRevision"`
	// TemplateChanges are the pod template's changed fields, as paths (update only).
	TemplateChanges []string `json:"templateChanges,omitempty"`
	// Problems stop every new pod, whatever the node.
	Problems []string     `json:"problems,omitempty"`
	Nodes    []NodeImpact `json:"nodes"`
	Summary  Summary      `json:"summary"`
	Rollout  Rollout      `json:"rollout"`
	// Analysis is the analysis gates' check against today's revision (managed DaemonSets with
	// gates only); PlanManifests adds it, Assess does not measure.
	Analysis *AnalysisCheck `json:"analysis,omitempty"`
}

// Summary counts nodes by change and problem.
type Summary struct {
	Nodes     int `json:"nodes"`
	Gains     int `json:"gains"`
	Loses     int `json:"loses"`
	Replaced  int `json:"replaced"`
	Unchanged int `json:"unchanged"`
	Keeps     int `json:"keeps"`
	// NotFit counts nodes where the new pod stays Pending; Preempting nodes where it evicts
	// other pods to run.
	NotFit     int `json:"notFit"`
	Preempting int `json:"preempting"`
}

// NodeImpact is one node: its daemon pod today and what happens to it.
type NodeImpact struct {
	Node   string     `json:"node"`
	Today  *PodToday  `json:"today,omitempty"`
	Change Change     `json:"change"`
	Reason string     `json:"reason,omitempty"`
	Fit    *FitResult `json:"fit,omitempty"` // for nodes that get a new pod
}

// PodToday is the DaemonSet's pod on a node today.
type PodToday struct {
	Name     string `json:"name"`
	Revision string `json:"revision"`
	Ready    bool   `json:"ready"`
}

// Assess decides what the change does. It never fails: what it cannot know (no live pods to time) it says.
func Assess(in Snapshot) Impact {
	ds := in.After
	p := Impact{Namespace: ds.Namespace, Name: ds.Name, Operation: "create", NewRevision: in.NewRevision || in.Live == nil, Nodes: []NodeImpact{}, Problems: in.Problems}
	if in.Live != nil {
		p.Operation = "update"
		if p.NewRevision {
			p.TemplateChanges = templateChanges(&in.Live.Spec.Template, &ds.Spec.Template)
		}
	}
	after := nodes.NewMatcher(&ds.Spec.Template.Spec)
	var before *nodes.Matcher
	if in.Live != nil {
		before = nodes.NewMatcher(&in.Live.Spec.Template.Spec)
	}
	daemonPods := podsByNode(in.DaemonPods)
	others := podsByNode(in.Pods)
	strategy := strategyOf(ds)
	surge := strategy == appsv1.RollingUpdateDaemonSetStrategyType && maxSurge(ds, len(in.Nodes)) > 0
	newPod := podOf(ds, in.Priority, in.PreemptionPolicy)

	sorted := append([]*corev1.Node(nil), in.Nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	for _, node := range sorted {
		np := NodeImpact{Node: node.Name}
		own := daemonPods[node.Name]
		if len(own) > 0 {
			pod := own[0]
			np.Today = &PodToday{Name: pod.Name, Revision: pod.Labels[appsv1.DefaultDaemonSetUniqueLabelKey], Ready: podReady(pod)}
		}
		v := after.Decide(node)
		switch {
		case np.Today == nil && v.Run:
			np.Change, np.Reason = Gains, gainReason(before, node)
		case np.Today == nil:
			np.Change = None
		case !v.Keep:
			np.Change, np.Reason = Loses, v.Reason
		case !v.Run && p.NewRevision && strategy == appsv1.RollingUpdateDaemonSetStrategyType:
			np.Change, np.Reason = Loses, v.Reason+": the rolling update deletes the old pod and creates none"
		case !v.Run:
			np.Change, np.Reason = Keeps, v.Reason+": the old pod keeps running and is not recreated once deleted"
		case p.NewRevision:
			np.Change, np.Reason = Replaced, replaceReason(strategy, rolloutapi.IsManaged(ds))
		default:
			np.Change = Unchanged
		}
		if np.Change == Gains || np.Change == Replaced {
			keepOld := np.Change == Replaced && surge
			fit := Fit(newPod, node, othersOn(others[node.Name], own, keepOld), in.Budgets...)
			np.Fit = &fit
		}
		p.Nodes = append(p.Nodes, np)
		p.Summary.add(np)
	}
	p.Rollout = planRollout(in, p)
	return p
}

func (s *Summary) add(np NodeImpact) {
	s.Nodes++
	switch np.Change {
	case Gains:
		s.Gains++
	case Loses:
		s.Loses++
	case Replaced:
		s.Replaced++
	case Unchanged:
		s.Unchanged++
	case Keeps:
		s.Keeps++
	}
	if np.Fit != nil {
		switch {
		case !np.Fit.Schedulable:
			s.NotFit++
		case len(np.Fit.Preempts) > 0:
			s.Preempting++
		}
	}
}

// gainReason says what lets the pod onto a node it did not run on: the live template's reason
// not to run there, which the new template no longer has.
func gainReason(before *nodes.Matcher, node *corev1.Node) string {
	if before == nil {
		return "new DaemonSet"
	}
	if v := before.Decide(node); !v.Run {
		return "no longer: " + v.Reason
	}
	return "the DaemonSet controller creates the missing pod"
}

func replaceReason(strategy appsv1.DaemonSetUpdateStrategyType, managed bool) string {
	switch {
	case managed:
		return "new revision: replaced by daemonguard's rollout"
	case strategy == appsv1.OnDeleteDaemonSetStrategyType:
		return "new revision: replaced only when you delete the old pod (OnDelete)"
	}
	return "new revision: replaced by the rolling update"
}

// strategyOf is the update strategy, RollingUpdate when unset as the API server defaults it.
func strategyOf(ds *appsv1.DaemonSet) appsv1.DaemonSetUpdateStrategyType {
	if ds.Spec.UpdateStrategy.Type == "" {
		return appsv1.RollingUpdateDaemonSetStrategyType
	}
	return ds.Spec.UpdateStrategy.Type
}

// podOf is the pod the DaemonSet controller creates from ds's template, with the priority
// admission gives it.
func podOf(ds *appsv1.DaemonSet, priority int32, policy corev1.PreemptionPolicy) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: *ds.Spec.Template.ObjectMeta.DeepCopy(), Spec: *ds.Spec.Template.Spec.DeepCopy()}
	pod.Namespace, pod.Name = ds.Namespace, ds.Name+"-new"
	pod.Spec.Priority = &priority
	if policy != "" {
		pod.Spec.PreemptionPolicy = &policy
	}
	defaultRequestsFromLimits(pod)
	return pod
}

// defaultRequestsFromLimits is the API server's defaulting of a container's requests to its
// limits (SetDefaults_Pod in pkg/apis/core/v1), which the scheduler's fit then counts. A
// manifest seldom writes requests it does not mean, but limits alone are common.
func defaultRequestsFromLimits(pod *corev1.Pod) {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			c := &list[i]
			for name, limit := range c.Resources.Limits {
				if _, ok := c.Resources.Requests[name]; ok {
					continue
				}
				if c.Resources.Requests == nil {
					c.Resources.Requests = corev1.ResourceList{}
				}
				c.Resources.Requests[name] = limit.DeepCopy()
			}
		}
	}
}

// podsByNode groups pods by the node they are bound to.
func podsByNode(pods []*corev1.Pod) map[string][]*corev1.Pod {
	out := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if n := nodes.OfPod(p); n != "" {
			out[n] = append(out[n], p)
		}
	}
	return out
}

// othersOn is the pods the new pod shares the node with: every pod bound there but the
// DaemonSet's own, which the new pod replaces (unless the rolling update surges and keeps it
// until the new one is available).
func othersOn(onNode, own []*corev1.Pod, keepOld bool) []*corev1.Pod {
	replaced := map[types.UID]bool{}
	if !keepOld {
		for _, p := range own {
			replaced[p.UID] = true
		}
	}
	var out []*corev1.Pod
	for _, p := range onNode {
		if p.Spec.NodeName != "" && !replaced[p.UID] {
			out = append(out, p)
		}
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ReadyAfter is the median time this DaemonSet's ready pods took from creation to Ready.
func ReadyAfter(pods []*corev1.Pod) (time.Duration, bool) {
	var ds []time.Duration
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
				if d := c.LastTransitionTime.Sub(p.CreationTimestamp.Time); d >= 0 {
					ds = append(ds, d)
				}
			}
		}
	}
	if len(ds) == 0 {
		return 0, false
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[len(ds)/2], true
}

// managedRollout is the managed rollout, as the controller's planner runs it.
func managedRollout(in Snapshot) (*rolloutplan.Timeline, error) {
	f, err := rolloutplan.Forecast(rolloutplan.ForecastInput{DaemonSet: in.After, Pods: in.DaemonPods, Nodes: in.Nodes, ReadyAfter: in.ReadyAfter, Now: in.Now})
	if err != nil {
		return nil, fmt.Errorf("rollout settings: %w", err)
	}
	return &f, nil
}

// maxTemplateChanges bounds the paths listed: a rewritten template names its first ones.
const maxTemplateChanges = 20

// templateChanges lists the paths, below spec.template, where after differs from live: a field
// set, changed or removed, a list that changed length, or the differing elements of one that did
// not. Both come from the API server's (after: merged with) live object, so defaults match.
func templateChanges(live, after *corev1.PodTemplateSpec) []string {
	var a, b any
	if toGeneric(live, &a) != nil || toGeneric(after, &b) != nil {
		return []string{"spec.template"}
	}
	var out []string
	diffPaths("spec.template", a, b, &out)
	sort.Strings(out)
	if len(out) > maxTemplateChanges {
		out = append(out[:maxTemplateChanges], fmt.Sprintf("and %d more", len(out)-maxTemplateChanges))
	}
	return out
}

func toGeneric(v any, out *any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

func diffPaths(path string, a, b any, out *[]string) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for k, av := range am {
			diffPaths(path+"."+k, av, bm[k], out)
		}
		for k, bv := range bm {
			if _, ok := am[k]; !ok {
				diffPaths(path+"."+k, nil, bv, out)
			}
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			diffPaths(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
		}
		return
	}
	*out = append(*out, path)
}
