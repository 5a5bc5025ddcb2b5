package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
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
)

// revisionLabel is the label the DaemonSet controller puts on pods and ControllerRevisions.
const revisionLabel = appsv1.DefaultDaemonSetUniqueLabelKey

// failureReasons are container waiting reasons that do not fix themselves without a new template.
var failureReasons = map[string]bool{
	"ImagePullBackOff": true, "ErrImagePull": true, "InvalidImageName": true,
	"CrashLoopBackOff": true, "CreateContainerConfigError": true, "CreateContainerError": true,
}

// Reconciler rolls out one managed DaemonSet per call: gather, plan (pure), apply.
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

// IsManaged tells DaemonSets that opted in to daemonguard's rollouts.
func IsManaged(ds *appsv1.DaemonSet) bool {
	return ds.Annotations[AnnotationRollout] == RolloutManaged && ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := r.Log.WithValues("daemonset", req.NamespacedName)
	var ds appsv1.DaemonSet
	if err := r.Client.Get(ctx, req.NamespacedName, &ds); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !IsManaged(&ds) || ds.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}
	now := r.Clock.Now()
	settings, err := ParseSettings(ds.Annotations)
	if err != nil {
		// Admitted while the webhook was bypassed: report, do nothing until it is fixed.
		return reconcile.Result{}, r.setCondition(ctx, &ds, PhaseFailed, ReasonInvalidSettings, InvalidSettingsMessage(err), now)
	}
	if ds.Status.ObservedGeneration < ds.Generation {
		// The DaemonSet controller has not yet created the revision for the new template.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	in, err := r.gather(ctx, &ds, settings, now)
	if err != nil {
		return reconcile.Result{}, err
	}
	if in.TargetRevision == "" {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	plan := BuildPlan(*in)
	if err := r.apply(ctx, log, &ds, plan, now); errors.Is(err, errReportDeferred) {
		observe(&ds, plan)
		return reconcile.Result{RequeueAfter: reportInterval}, nil
	} else if err != nil {
		return reconcile.Result{}, err
	}
	observe(&ds, plan)
	switch {
	case plan.RequeueAfter > 0:
		return reconcile.Result{RequeueAfter: plan.RequeueAfter}, nil
	case plan.Phase == PhaseProgressing && ds.Spec.MinReadySeconds > 0:
		return reconcile.Result{RequeueAfter: time.Duration(ds.Spec.MinReadySeconds) * time.Second}, nil
	}
	return reconcile.Result{}, nil
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

// gather reads the DaemonSet's revisions, nodes and pods into the planner's input.
func (r *Reconciler) gather(ctx context.Context, ds *appsv1.DaemonSet, settings Settings, now time.Time) (*Input, error) {
	target, err := r.currentRevision(ctx, ds)
	if err != nil {
		return nil, err
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

	matcher := nodes.NewMatcher(&ds.Spec.Template.Spec)
	in := &Input{
		Name: ds.Name, Namespace: ds.Namespace,
		TargetRevision:  target,
		Settings:        settings,
		MinReadySeconds: ds.Spec.MinReadySeconds,
		State:           readState(ds.Annotations),
		Now:             now,
	}
	if c := activeCondition(ds); c != nil && c.Type == ConditionFailed {
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
	return in, nil
}

// currentRevision is the controller-revision-hash of the DaemonSet's newest ControllerRevision,
// which after the DaemonSet controller has observed the generation is the current template's.
func (r *Reconciler) currentRevision(ctx context.Context, ds *appsv1.DaemonSet) (string, error) {
	var list appsv1.ControllerRevisionList
	if err := r.Client.List(ctx, &list, client.InNamespace(ds.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("list controller revisions: %w", err)
	}
	var newest *appsv1.ControllerRevision
	for i := range list.Items {
		cr := &list.Items[i]
		if metav1.IsControlledBy(cr, ds) && (newest == nil || cr.Revision > newest.Revision) {
			newest = cr
		}
	}
	if newest == nil {
		return "", nil
	}
	return newest.Labels[revisionLabel], nil
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

// apply performs every write of a plan: pod deletions, then status annotations, conditions and
// Events.
func (r *Reconciler) apply(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet, plan Plan, now time.Time) error {
	if err := r.deletePods(ctx, log, ds, plan.Delete, now); err != nil {
		return err
	}
	r.forgetSettled()

	previous := activeCondition(ds)
	transition := previous == nil || string(previous.Type) != string(plan.Phase) || previous.Reason != plan.Reason ||
		ds.Annotations[StatusStep] != plan.Step || ds.Annotations[StatusRevision] != plan.State.Revision
	if !transition && !r.reportDue(ds, now) {
		// Only counts moved: on a 1,000-node rollout every pod event would otherwise cost two
		// writes to the API server the rollout itself is waiting on. Report at most once per
		// reportInterval; the caller requeues to flush.
		return errReportDeferred
	}
	if err := r.writeState(ctx, ds, plan); err != nil {
		return err
	}
	if err := r.setCondition(ctx, ds, plan.Phase, plan.Reason, plan.Message, now); err != nil {
		return err
	}
	if transition {
		r.event(ds, plan)
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

// reportInterval bounds how often progress counts are written while nothing else changes.
const reportInterval = time.Second

var errReportDeferred = errors.New("progress report deferred")

// reportDue tells whether the DaemonSet's progress may be reported now, and if so records it.
func (r *Reconciler) reportDue(ds *appsv1.DaemonSet, now time.Time) bool {
	key := types.NamespacedName{Namespace: ds.Namespace, Name: ds.Name}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reported == nil {
		r.reported = map[types.NamespacedName]time.Time{}
	}
	if now.Sub(r.reported[key]) < reportInterval {
		return false
	}
	r.reported[key] = now
	return true
}

// forgetSettled drops deletions older than the cache could plausibly lag.
func (r *Reconciler) forgetSettled() {
	r.mu.Lock()
	defer r.mu.Unlock()
	cutoff := r.Clock.Now().Add(-time.Minute)
	for uid, at := range r.deleted {
		if at.Before(cutoff) {
			delete(r.deleted, uid)
		}
	}
}

func (r *Reconciler) event(ds *appsv1.DaemonSet, plan Plan) {
	if plan.Phase == PhaseFailed {
		rolloutFailures.WithLabelValues(ds.Namespace, ds.Name, plan.Reason).Inc()
	}
	r.Recorder.Eventf(ds, nil, plan.Event.Type, plan.Event.Reason, "Rollout", "%s", plan.Event.Note)
}

// readState recovers the controller's memory from the status annotations.
func readState(a map[string]string) RolloutState {
	s := RolloutState{Revision: a[StatusRevision], PauseToken: a[StatusPauseToken], FailedRevision: a[StatusFailedRevision]}
	if step := a[StatusStep]; step != "" {
		if i, err := strconv.Atoi(strings.SplitN(step, "/", 2)[0]); err == nil && i > 0 {
			s.StepIndex = i - 1
		}
		if strings.HasSuffix(step, ": done") {
			s.StepIndex++
		}
	}
	s.StepStarted, _ = time.Parse(time.RFC3339, a[StatusStepStarted])
	if updated, at, ok := strings.Cut(a[StatusProgress], "@"); ok {
		s.ProgressUpdated, _ = strconv.Atoi(updated)
		s.Progress, _ = time.Parse(time.RFC3339, at)
	}
	return s
}

// stateAnnotations renders the plan's state and report; nil values remove an annotation.
func stateAnnotations(plan Plan) map[string]*string {
	str := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	next := ""
	if len(plan.NextNodes) > 0 {
		next = strings.Join(plan.NextNodes, ",") + " (" + plan.NextReason + ")"
	}
	st := plan.State
	return map[string]*string{
		StatusRevision:       str(st.Revision),
		StatusStep:           str(plan.Step),
		StatusStepStarted:    str(st.StepStarted.UTC().Format(time.RFC3339)),
		StatusPauseToken:     str(st.PauseToken),
		StatusProgress:       str(fmt.Sprintf("%d@%s", st.ProgressUpdated, st.Progress.UTC().Format(time.RFC3339))),
		StatusUpdated:        str(fmt.Sprintf("%d/%d", plan.Updated, plan.Desired)),
		StatusNextNodes:      str(next),
		StatusFailedRevision: str(st.FailedRevision),
	}
}

// writeState patches the status annotations when they changed. The patch touches only
// status.daemonguard.io/ keys, which the admission webhook lets through without re-evaluating.
func (r *Reconciler) writeState(ctx context.Context, ds *appsv1.DaemonSet, plan Plan) error {
	want := stateAnnotations(plan)
	changes := map[string]*string{}
	for k, v := range want {
		cur, ok := ds.Annotations[k]
		switch {
		case v == nil && ok:
			changes[k] = nil
		case v != nil && (!ok || cur != *v):
			changes[k] = v
		}
	}
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

func activeCondition(ds *appsv1.DaemonSet) *appsv1.DaemonSetCondition {
	for i := range ds.Status.Conditions {
		c := &ds.Status.Conditions[i]
		if isRolloutCondition(c.Type) && c.Status == corev1.ConditionTrue {
			return c
		}
	}
	return nil
}

func isRolloutCondition(t appsv1.DaemonSetConditionType) bool {
	return t == ConditionProgressing || t == ConditionPaused || t == ConditionFailed || t == ConditionComplete
}

// setCondition makes the phase's condition the one True rollout condition, keeping conditions
// of other owners, and writes the status only when something changed.
func (r *Reconciler) setCondition(ctx context.Context, ds *appsv1.DaemonSet, phase Phase, reason, message string, now time.Time) error {
	want := []appsv1.DaemonSetConditionType{ConditionProgressing, ConditionPaused, ConditionFailed, ConditionComplete}
	conds := append([]appsv1.DaemonSetCondition(nil), ds.Status.Conditions...)
	changed := false
	for _, t := range want {
		status, r1, m1 := corev1.ConditionFalse, "", ""
		if string(t) == string(phase) {
			status, r1, m1 = corev1.ConditionTrue, reason, message
		}
		idx := -1
		for i := range conds {
			if conds[i].Type == t {
				idx = i
			}
		}
		if idx < 0 {
			conds = append(conds, appsv1.DaemonSetCondition{Type: t, Status: status, Reason: r1, Message: m1, LastTransitionTime: metav1.NewTime(now)})
			changed = true
			continue
		}
		c := &conds[idx]
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
	sort.SliceStable(conds, func(i, j int) bool { return conds[i].Type < conds[j].Type })
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
