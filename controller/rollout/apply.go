package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// apply performs every write of a decision, in order: pod deletions, the rollback, status
// annotations, conditions, the Event, the metrics, and this process's memory of its deletions and
// reports.
func (r *Reconciler) apply(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet, d Decision, now time.Time) error {
	if d.Plan != nil {
		if err := r.deletePods(ctx, log, ds, d.Plan.Delete, now); err != nil {
			return err
		}
	}
	for _, m := range d.Measured {
		analysisMeasurements.WithLabelValues(ds.Namespace, ds.Name, m.Gate, m.Result).Inc()
	}
	if d.Rollback != nil {
		if err := r.rollBack(ctx, log, ds, *d.Rollback); err != nil {
			return err
		}
	}
	r.forgetSettled(now)
	if err := r.writeAnnotations(ctx, ds, d.Annotations); err != nil {
		return err
	}
	if e := d.Rewritten; e != nil {
		r.Recorder.Eventf(ds, nil, e.Type, e.Reason, "Rollout", "%s", e.Note)
	}
	if err := r.writeConditions(ctx, ds, d.Conditions); err != nil {
		return err
	}
	if e := d.Event; e != nil && !r.sameEventAgain(ds, *e, now) {
		if e.FailureReason != "" {
			rolloutFailures.WithLabelValues(ds.Namespace, ds.Name, e.FailureReason).Inc()
		}
		r.Recorder.Eventf(ds, nil, e.Type, e.Reason, "Rollout", "%s", e.Note)
	}
	if d.Plan != nil {
		observe(ds, *d.Plan)
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

// recordedEvent is a rollout Event this process recorded, and when.
type recordedEvent struct {
	event rolloutplan.Event
	at    time.Time
}

// eventEcho is how long after recording an Event the same Event is taken for the echo of a
// lagging cache: the reconcile that follows a report's writes can read the new annotations with
// the condition they replace, see a transition again and plan the same Event. A minute is far
// above the cache's lag and far below the time between two real transitions of equal wording
// (their messages name steps, counts and times).
const eventEcho = time.Minute

// sameEventAgain tells whether e is the Event last recorded for ds, less than eventEcho ago, and
// otherwise remembers e as the last one: a change of cause records one Event, not one per
// reconcile that still sees the cause's old condition.
func (r *Reconciler) sameEventAgain(ds *appsv1.DaemonSet, e rolloutplan.Event, now time.Time) bool {
	key := client.ObjectKeyFromObject(ds)
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.recorded[key]; ok && last.event == e && now.Sub(last.at) < eventEcho {
		return true
	}
	if r.recorded == nil {
		r.recorded = map[types.NamespacedName]recordedEvent{}
	}
	r.recorded[key] = recordedEvent{event: e, at: now}
	return false
}

// maxParallelDeletes bounds the concurrent pod deletions of one reconcile. A wave of a 1,000-node
// rollout deletes 100 pods; one after the other they would take as many round trips, and the
// rollout would wait for the last one. The DaemonSet controller deletes a sync's pods in parallel
// too (syncNodes); the client's QPS limit still applies.
const maxParallelDeletes = 32

// deletePods deletes the plan's pods concurrently, each with its UID as precondition, and
// remembers every pod deleted (or already gone) so the next plan counts it as terminating even
// if the cache lags.
func (r *Reconciler) deletePods(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet, refs []rolloutplan.PodRef, now time.Time) error {
	if len(refs) == 0 {
		return nil
	}
	errs := make([]error, len(refs))
	gone := make([]bool, len(refs)) // deleted now, or already
	slots := make(chan struct{}, maxParallelDeletes)
	var wg sync.WaitGroup
	for i, d := range refs {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			uid := types.UID(d.UID)
			err := r.deletePod(ctx, ds.Namespace, d.Name, uid)
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				errs[i] = fmt.Errorf("delete pod %s on %s: %w", d.Name, d.Node, err)
				return
			}
			gone[i] = true
			log.Info("Deleted old pod", "pod", d.Name, "node", d.Node)
		})
	}
	wg.Wait()
	r.remember(refs, gone, now)
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

// deletePod deletes the pod of that name if it still has uid.
func (r *Reconciler) deletePod(ctx context.Context, namespace, name string, uid types.UID) error {
	if r.Pods != nil {
		return r.Pods.Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	return r.Client.Delete(ctx, pod, client.Preconditions{UID: &uid})
}

// remember records the pods of refs that are gone as deleted at now, in a new map (see
// Reconciler.deleted).
func (r *Reconciler) remember(refs []rolloutplan.PodRef, gone []bool, now time.Time) {
	if !slices.Contains(gone, true) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	next := make(map[types.UID]time.Time, len(r.deleted)+len(refs))
	maps.Copy(next, r.deleted)
	for i, d := range refs {
		if gone[i] {
			next[types.UID(d.UID)] = now
		}
	}
	if len(r.deleted) == 0 || now.Before(r.deletedOldest) {
		r.deletedOldest = now
	}
	r.deleted = next
	r.deletedGen++
}

// deletionSettles is how long a deletion is remembered at least: longer than the cache could
// plausibly lag behind it.
const deletionSettles = time.Minute

// forgetSettled drops, in a new map (see Reconciler.deleted), the deletions older than
// deletionSettles, once the oldest is twice that old: a new map makes every memo mark the
// deletions again (Observed.DeletedGen), and through a rollout some deletion turns a minute old
// on nearly every reconcile. An entry past its minute matters only to a pod whose deletion was
// lost, which then counts as terminating a minute longer.
func (r *Reconciler) forgetSettled(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.deleted) == 0 || now.Sub(r.deletedOldest) < 2*deletionSettles {
		return
	}
	cutoff := now.Add(-deletionSettles)
	next := make(map[types.UID]time.Time, len(r.deleted))
	r.deletedOldest = time.Time{}
	for uid, at := range r.deleted {
		if !at.Before(cutoff) {
			next[uid] = at
			if r.deletedOldest.IsZero() || at.Before(r.deletedOldest) {
				r.deletedOldest = at
			}
		}
	}
	r.deleted = next
	r.deletedGen++
}

// rollBack puts back the template of rb's revision, as `daemonguard rollout undo` does: a
// strategic merge patch with the revision's data, which replaces spec.template. The patch carries
// the DaemonSet's resourceVersion, so that a template changed since this reconcile read it is
// never overwritten: the conflict is returned, and the next reconcile plans from the new
// template. Once put back, the DaemonSet controller records the template as a new, highest
// revision, and the rollout controller rolls it out like any new template.
func (r *Reconciler) rollBack(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet, rb Rollback) error {
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var rev appsv1.ControllerRevision
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ds.Namespace, Name: rb.Name}, &rev); err != nil {
		return fmt.Errorf("roll back to revision %d (%s): read it: %w", rb.Number, rb.Name, err)
	}
	patch, err := rolloutapi.RestorePatch(&rev, ds.ResourceVersion)
	if err != nil {
		return fmt.Errorf("roll back: %w", err)
	}
	if same, err := rolloutapi.RevisionMatches(ds, &rev); err != nil || same {
		return err // already put back (by hand, or by a reconcile whose report was not written)
	}
	if err := r.Client.Patch(ctx, ds, client.RawPatch(types.StrategicMergePatchType, patch)); err != nil {
		if !apierrors.IsConflict(err) {
			r.Recorder.Eventf(ds, nil, corev1.EventTypeWarning, reasonRollbackFailed, "Rollout",
				"the analysis of revision %s failed; putting back the template of revision %d failed: %v; trying again", rb.Failed, rb.Number, err)
		}
		return fmt.Errorf("roll back to revision %d (%s): %w", rb.Number, rb.Name, err)
	}
	rollbacks.WithLabelValues(ds.Namespace, ds.Name).Inc()
	r.Recorder.Eventf(ds, nil, corev1.EventTypeWarning, reasonRolledBack, "Rollout",
		"the analysis of revision %s failed: the template of revision %d (%s) is put back (%s: %s)",
		rb.Failed, rb.Number, rb.Hash, rolloutapi.AnnotationOnAnalysisFailure, rolloutapi.OnAnalysisFailureRollback)
	log.Info("Rolled back after a failed analysis", "failedRevision", rb.Failed, "revision", rb.Number, "hash", rb.Hash)
	return nil
}

// Reasons of the rollback's Events, and of the Event that says malformed status annotations
// were written anew (Decision.Rewritten).
const (
	reasonRolledBack      = "RolloutRolledBack"
	reasonRollbackFailed  = "RolloutRollbackFailed"
	reasonStatusRewritten = "RolloutStatusRewritten"
)

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

var (
	rolloutUpdated     = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "daemonguard_rollout_updated_nodes", Help: "Nodes running an available pod of the target revision."}, []string{"namespace", "name"})
	rolloutDesired     = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "daemonguard_rollout_desired_nodes", Help: "Reachable nodes the rollout covers."}, []string{"namespace", "name"})
	rolloutUnavailable = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "daemonguard_rollout_unavailable_nodes", Help: "Reachable nodes without an available pod."}, []string{"namespace", "name"})
	rolloutPhase       = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "daemonguard_rollout_phase", Help: "1 for the rollout's current phase (Progressing, Paused, Failed, Complete)."}, []string{"namespace", "name", "phase"})
	rolloutDeletions   = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "daemonguard_rollout_pod_deletions_total", Help: "Old-revision pods deleted by the rollout controller."}, []string{"namespace", "name"})
	rolloutFailures    = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "daemonguard_rollout_failures_total", Help: "Rollouts halted, by reason."}, []string{"namespace", "name", "reason"})
	// One per measurement of a gate that the planner judged: Prometheus' answer, or its absence.
	analysisMeasurements = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "daemonguard_rollout_analysis_measurements_total", Help: "Analysis gate measurements, by result (Passed, Failed, Inconclusive)."}, []string{"namespace", "name", "gate", "result"})
	rollbacks            = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "daemonguard_rollout_rollbacks_total", Help: "Templates put back after a failed analysis (daemonguard.io/on-analysis-failure: rollback)."}, []string{"namespace", "name"})
)

func init() {
	metrics.Registry.MustRegister(rolloutUpdated, rolloutDesired, rolloutUnavailable, rolloutPhase, rolloutDeletions, rolloutFailures, analysisMeasurements, rollbacks)
}

// observe records the plan's counts and phase in the rollout gauges.
func observe(ds *appsv1.DaemonSet, plan rolloutplan.Plan) {
	rolloutUpdated.WithLabelValues(ds.Namespace, ds.Name).Set(float64(plan.Updated))
	rolloutDesired.WithLabelValues(ds.Namespace, ds.Name).Set(float64(plan.Desired))
	rolloutUnavailable.WithLabelValues(ds.Namespace, ds.Name).Set(float64(plan.Unavailable))
	for _, p := range []rolloutapi.Phase{rolloutapi.PhaseProgressing, rolloutapi.PhasePaused, rolloutapi.PhaseFailed, rolloutapi.PhaseComplete} {
		v := 0.0
		if p == plan.Phase {
			v = 1
		}
		rolloutPhase.WithLabelValues(ds.Namespace, ds.Name, string(p)).Set(v)
	}
}
