package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// revisionLabel is the label the DaemonSet controller puts on pods and ControllerRevisions.
const revisionLabel = appsv1.DefaultDaemonSetUniqueLabelKey

// failureReasons are container waiting reasons that do not fix themselves without a new template.
var failureReasons = map[string]bool{
	"ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
}

// Reconciler rolls out one managed DaemonSet per call: gather, decide (pure), apply.
type Reconciler struct {
	Client   client.Client // reads from the cache, writes to the API server
	Store    Store         // pods and nodes, read from the cache without copies
	Recorder events.EventRecorder
	Log      logr.Logger
	// Clock is a test seam; production uses the real clock.
	Clock clock.PassiveClock

	// deleted remembers pods this process deleted until the cache shows them terminating or
	// gone, so a lagging cache never makes the planner spend the same budget twice. After a
	// restart it is empty, and the cache, freshly listed, has no lag to cover.
	mu       sync.Mutex
	deleted  map[types.UID]time.Time
	reported map[types.NamespacedName]time.Time // last progress report per DaemonSet
}

// Reconcile implements reconcile.Reconciler: gather the facts, decide (pure), apply the writes.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := r.Log.WithValues("daemonset", req.NamespacedName)
	var ds appsv1.DaemonSet
	if err := r.Client.Get(ctx, req.NamespacedName, &ds); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !rolloutapi.IsManaged(&ds) || ds.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	facts, err := r.gather(ctx, log, &ds)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := Decide(*facts)
	if err := r.apply(ctx, log, &ds, d, facts.Now); err != nil {
		return reconcile.Result{}, err
	}
	if d.Plan != nil {
		observe(&ds, *d.Plan)
	}
	return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
}

// Store reads the informers' own objects, without copying them: on 1,000 nodes, copying every
// node and pod into a typed list on each reconcile cost more than the rest of the reconcile. What
// it returns is shared with the cache and must never be modified.
type Store interface {
	// PodsOf returns the pods of the namespace whose controller has this UID.
	PodsOf(ctx context.Context, namespace string, uid types.UID) ([]*corev1.Pod, error)
	// Nodes returns every node.
	Nodes(ctx context.Context) ([]*corev1.Node, error)
}

// gather reads what one reconcile of ds needs, reading the clock once: the settings, the last
// report, and, once the current template's revision is known, the revisions, nodes and pods the
// planner takes. Settings that do not parse end the gathering.
func (r *Reconciler) gather(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet) (*Facts, error) {
	f := &Facts{Now: r.Clock.Now(), Annotations: ds.Annotations, Conditions: ds.Status.Conditions, LastReport: r.lastReport(ds)}
	settings, err := ParseSettings(ds.Annotations)
	if err != nil {
		f.SettingsErr = err
		return f, nil
	}
	target, err := r.currentRevision(ctx, ds)
	if err != nil || target == "" {
		// Unknown until the DaemonSet controller has observed the generation and created the
		// revision of the new template.
		return f, err
	}
	pods, err := r.Store.PodsOf(ctx, ds.Namespace, ds.UID)
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	nodeList, err := r.Store.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	podsByNode := map[string][]PodState{}
	for _, p := range pods {
		if nodeName := podNode(p); nodeName != "" {
			podsByNode[nodeName] = append(podsByNode[nodeName], r.podState(p))
		}
	}

	state, err := readState(ds.Annotations)
	if err != nil {
		log.Info("Ignored malformed status annotations", "err", err)
	}
	matcher := nodes.NewMatcher(&ds.Spec.Template.Spec)
	in := &Input{
		Name: ds.Name, Namespace: ds.Namespace,
		TargetRevision:  target,
		Settings:        settings,
		MinReadySeconds: ds.Spec.MinReadySeconds,
		State:           state,
		Now:             f.Now,
	}
	if c := activeCondition(ds.Status.Conditions); c != nil && c.Type == rolloutapi.ConditionFailed {
		in.PreviousFailure = c.Reason
	}
	for _, n := range nodeList {
		if !eligible(matcher, n) {
			continue
		}
		_, cp := n.Labels["node-role.kubernetes.io/control-plane"]
		in.Nodes = append(in.Nodes, NodeState{
			Name: n.Name, ControlPlane: cp, Reachable: reachable(n),
			Domain: topologyDomain(n, settings.TopologyKey), Pods: podsByNode[n.Name],
		})
	}
	f.Input = in
	return f, nil
}

// currentRevision is the controller-revision-hash of the DaemonSet's current template, "" while
// unknown.
func (r *Reconciler) currentRevision(ctx context.Context, ds *appsv1.DaemonSet) (string, error) {
	var list appsv1.ControllerRevisionList
	if err := r.Client.List(ctx, &list, client.InNamespace(ds.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("list controller revisions: %w", err)
	}
	revs := make([]*appsv1.ControllerRevision, len(list.Items))
	for i := range list.Items {
		revs[i] = &list.Items[i]
	}
	return rolloutapi.CurrentRevisionHash(ds, revs), nil
}

func (r *Reconciler) podState(p *corev1.Pod) PodState {
	s := PodState{Name: p.Name, UID: string(p.UID), Revision: p.Labels[revisionLabel]}
	if p.DeletionTimestamp != nil {
		s.Terminating, s.DeletedAt = true, p.DeletionTimestamp.Time
	} else {
		r.mu.Lock()
		if at, ok := r.deleted[p.UID]; ok {
			s.Terminating, s.DeletedAt = true, at
		}
		r.mu.Unlock()
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

// podNode is the node a daemon pod belongs to: its binding, or before scheduling the node its
// required affinity pins it to.
func podNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
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

// apply performs every write of a decision, in order: pod deletions, status annotations,
// conditions, the Event.
func (r *Reconciler) apply(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet, d Decision, now time.Time) error {
	if d.Plan != nil {
		if err := r.deletePods(ctx, log, ds, d.Plan.Delete, now); err != nil {
			return err
		}
	}
	r.forgetSettled(now)
	if err := r.writeAnnotations(ctx, ds, d.Annotations); err != nil {
		return err
	}
	if err := r.writeConditions(ctx, ds, d.Conditions); err != nil {
		return err
	}
	if e := d.Event; e != nil {
		if e.FailureReason != "" {
			rolloutFailures.WithLabelValues(ds.Namespace, ds.Name, e.FailureReason).Inc()
		}
		r.Recorder.Eventf(ds, nil, e.Type, e.Reason, "Rollout", "%s", e.Note)
	}
	if d.Reported {
		r.mu.Lock()
		if r.reported == nil {
			r.reported = map[types.NamespacedName]time.Time{}
		}
		r.reported[client.ObjectKeyFromObject(ds)] = now
		r.mu.Unlock()
	}
	return nil
}

// maxParallelDeletes bounds the concurrent pod deletions of one reconcile. A wave of a 1,000-node
// rollout deletes 100 pods; one after the other they would take as many round trips, and the
// rollout would wait for the last one. The DaemonSet controller deletes a sync's pods in parallel
// too (syncNodes); the client's QPS limit still applies.
const maxParallelDeletes = 32

// deletePods deletes the plan's pods concurrently, each with its UID as precondition, and
// remembers every pod deleted (or already gone) so the next plan counts it as terminating even
// if the cache lags.
func (r *Reconciler) deletePods(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet, refs []PodRef, now time.Time) error {
	if len(refs) == 0 {
		return nil
	}
	errs := make([]error, len(refs))
	slots := make(chan struct{}, maxParallelDeletes)
	var wg sync.WaitGroup
	for i, d := range refs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: d.Name}}
			uid := types.UID(d.UID)
			err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &uid})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs[i] = fmt.Errorf("delete pod %s on %s: %w", d.Name, d.Node, err)
				return
			}
			r.mu.Lock()
			if r.deleted == nil {
				r.deleted = map[types.UID]time.Time{}
			}
			r.deleted[uid] = now
			r.mu.Unlock()
			log.Info("Deleted old pod", "pod", d.Name, "node", d.Node)
		})
	}
	wg.Wait()
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	if deleted := len(refs) - failed; deleted > 0 {
		rolloutDeletions.WithLabelValues(ds.Namespace, ds.Name).Add(float64(deleted))
	}
	return errors.Join(errs...)
}

// lastReport is when this process last reported ds's progress; zero if never.
func (r *Reconciler) lastReport(ds *appsv1.DaemonSet) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reported[client.ObjectKeyFromObject(ds)]
}

// forgetSettled drops deletions older than the cache could plausibly lag.
func (r *Reconciler) forgetSettled(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cutoff := now.Add(-time.Minute)
	for uid, at := range r.deleted {
		if at.Before(cutoff) {
			delete(r.deleted, uid)
		}
	}
}

// readState recovers the controller's memory from the status annotations. A malformed value
// (status annotations are not admission-checked) is forgotten: the rollout then resumes as if it
// had not been written, which the planner treats as a fresh start of that part of its state.
func readState(a map[string]string) (RolloutState, error) {
	st, err := rolloutapi.DecodeStatus(a)
	return RolloutState{
		Revision: st.Revision, StepIndex: st.Step.Index, StepStarted: st.StepStarted, PauseToken: st.PauseToken,
		FailedRevision: st.FailedRevision, Progress: st.Progress, ProgressUpdated: st.ProgressUpdated,
	}, err
}

// writeAnnotations patches the status annotation changes, if any. The patch touches only
// status.daemonguard.io/ keys, which the admission webhook lets through without re-evaluating.
func (r *Reconciler) writeAnnotations(ctx context.Context, ds *appsv1.DaemonSet, changes map[string]*string) error {
	if len(changes) == 0 {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": changes}})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, ds, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("write rollout status annotations: %w", err)
	}
	return nil
}

// writeConditions replaces the DaemonSet's conditions, if there are new ones.
func (r *Reconciler) writeConditions(ctx context.Context, ds *appsv1.DaemonSet, conds []appsv1.DaemonSetCondition) error {
	if conds == nil {
		return nil
	}
	updated := ds.DeepCopy()
	updated.Status.Conditions = conds
	// A merge patch of the conditions alone: the DaemonSet controller writes the counters of the
	// same status concurrently, and neither must make the other retry.
	if err := r.Client.Status().Patch(ctx, updated, client.MergeFrom(ds)); err != nil {
		return fmt.Errorf("update rollout conditions: %w", err)
	}
	ds.Status = updated.Status
	ds.ResourceVersion = updated.ResourceVersion
	return nil
}
