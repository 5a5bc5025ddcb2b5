// Package audit evaluates the DaemonSets already stored in a cluster against the policy set in
// force, including what the inject policy would add to templates created before daemonguard was
// installed. The webhook runs it periodically (leader only) and reports Events, metrics and, when
// enabled, OpenReports Reports (openreports.io/v1alpha1, one or more per namespace with
// DaemonSets); `daemonguard audit` runs it once against the current kubeconfig.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// Finding is the audit result for one DaemonSet.
type Finding struct {
	Namespace  string             `json:"namespace"`
	Name       string             `json:"name"`
	UID        types.UID          `json:"uid,omitempty"`
	Violations []policy.Violation `json:"violations"`
	// MissingInjection is set when the inject policy would change the stored template: the
	// DaemonSet predates daemonguard, or was admitted while the webhook was bypassed.
	MissingInjection bool   `json:"missingInjection"`
	Error            string `json:"error,omitempty"`
	// TimedOut says the evaluation passed the audit's deadline per DaemonSet (Error names it):
	// the policies take too long on this object, and admission would meet the same.
	TimedOut bool `json:"timedOut,omitempty"`
}

// DefaultObjectTimeout bounds the evaluation of one DaemonSet in an audit pass: many times what
// the built-in policies take on any object (milliseconds), above the webhook's own evaluation
// deadline, so that a DaemonSet admission can judge the audit can too, and a policy that takes
// longer costs the pass this much, not the pass itself.
const DefaultObjectTimeout = 5 * time.Second

// Denied tells whether admission would reject this DaemonSet today.
func (f Finding) Denied() bool {
	if f.Error != "" {
		return true
	}
	for _, v := range f.Violations {
		if v.Action == policy.Deny {
			return true
		}
	}
	return false
}

// Run gathers DaemonSets, namespaces, nodes and priority classes through reader and evaluates
// every DaemonSet outside the exempt namespaces, labelled daemonguard.io/ignore or not (the label
// opts out of injection only, never out of the audit). Findings are sorted by namespace and name.
// Listing errors name what could not be read (a missing RBAC rule shows up here).
//
// Each DaemonSet is evaluated within DefaultObjectTimeout (RunWithin).
func Run(ctx context.Context, reader client.Reader, set *policy.Set, exempt []string) ([]Finding, error) {
	return RunWithin(ctx, reader, set, exempt, DefaultObjectTimeout)
}

// RunWithin is Run with each DaemonSet's evaluation bounded by objectTimeout (DefaultObjectTimeout
// when not positive): one that takes longer is a Finding with TimedOut set, and the pass goes on
// with the next.
func RunWithin(ctx context.Context, reader client.Reader, set *policy.Set, exempt []string, objectTimeout time.Duration) ([]Finding, error) {
	if objectTimeout <= 0 {
		objectTimeout = DefaultObjectTimeout
	}
	var daemonSets appsv1.DaemonSetList
	if err := reader.List(ctx, &daemonSets); err != nil {
		return nil, describe("list DaemonSets in all namespaces", err)
	}
	var namespaces corev1.NamespaceList
	if err := reader.List(ctx, &namespaces); err != nil {
		return nil, describe("list Namespaces", err)
	}
	var nodeList corev1.NodeList
	if err := reader.List(ctx, &nodeList); err != nil {
		return nil, describe("list Nodes", err)
	}
	var classes schedulingv1.PriorityClassList
	if err := reader.List(ctx, &classes); err != nil {
		return nil, describe("list PriorityClasses", err)
	}
	priorities := make(map[string]int32, len(classes.Items))
	for _, pc := range classes.Items {
		priorities[pc.Name] = pc.Value
	}
	nsLabels := make(map[string]map[string]string, len(namespaces.Items))
	for _, ns := range namespaces.Items {
		nsLabels[ns.Name] = ns.Labels
	}
	nodes := make([]*corev1.Node, len(nodeList.Items))
	for i := range nodeList.Items {
		nodes[i] = &nodeList.Items[i]
	}
	// The facts are read once per pass, not once per DaemonSet.
	core := &admission.Reviewer{Exempt: exempt, Lookups: admission.Lookups{
		NamespaceLabels: func(_ context.Context, name string) (map[string]string, error) { return nsLabels[name], nil },
		Nodes:           func(context.Context) ([]*corev1.Node, error) { return nodes, nil },
		PriorityClass:   admission.PriorityClassValues(priorities),
	}}
	var findings []Finding
	for i := range daemonSets.Items {
		if f, ok := evaluate(ctx, core, set, &daemonSets.Items[i], objectTimeout); ok {
			findings = append(findings, f)
		}
	}
	sort.Slice(findings, func(i, j int) bool {
		if findings[i].Namespace != findings[j].Namespace {
			return findings[i].Namespace < findings[j].Namespace
		}
		return findings[i].Name < findings[j].Name
	})
	return findings, nil
}

func describe(what string, err error) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s: forbidden; the audit needs get/list on daemonsets, namespaces, nodes and priorityclasses: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// evaluate runs the admission core over a stored DaemonSet within timeout; ok is false when
// admission leaves it alone (an exempt namespace).
func evaluate(ctx context.Context, core *admission.Reviewer, set *policy.Set, ds *appsv1.DaemonSet, timeout time.Duration) (Finding, bool) {
	f := Finding{Namespace: ds.Namespace, Name: ds.Name, UID: ds.UID, Violations: []policy.Violation{}}
	obj := ds.DeepCopy()
	obj.APIVersion, obj.Kind = "apps/v1", "DaemonSet"
	obj.ManagedFields = nil
	obj.Status = appsv1.DaemonSetStatus{}
	raw, err := json.Marshal(obj)
	if err != nil {
		f.Error = err.Error()
		return f, true
	}
	evalCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	r := core.Simulate(evalCtx, set, admission.Review{Operation: policy.OpAudit, Namespace: ds.Namespace, Object: raw})
	switch {
	case r.Skip != "":
		return f, false
	case r.Err() != nil && ctx.Err() == nil && errors.Is(evalCtx.Err(), context.DeadlineExceeded):
		f.TimedOut = true
		f.Error = fmt.Sprintf("the policies took longer than the audit's deadline of %s per DaemonSet", timeout)
		return f, true
	case r.Err() != nil:
		f.Error = r.Err().Error()
		return f, true
	}
	f.MissingInjection = len(r.Patch) > 0
	if r.Violations != nil {
		f.Violations = r.Violations
	}
	return f, true
}

var (
	auditViolations = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "daemonguard_audit_violations", Help: "Policy violations found by the last audit, by policy and enforcement action."}, []string{"policy", "action"})
	auditDaemonSets = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "daemonguard_audit_daemonsets", Help: "DaemonSets seen by the last audit, by state (compliant, violating, missing_injection, error, timeout)."}, []string{"state"})
	auditLastRun    = prometheus.NewGauge(prometheus.GaugeOpts{Name: "daemonguard_audit_last_run_timestamp_seconds", Help: "When the last audit finished (Unix seconds)."})
	auditDuration   = prometheus.NewGauge(prometheus.GaugeOpts{Name: "daemonguard_audit_duration_seconds", Help: "How long the last audit took: reading the DaemonSets, evaluating them, recording its Events (written in the background) and writing its Reports."})
)

// registerMetrics registers the audit's metrics once, when an audit runs or writes Reports
// (webhook replicas): the controller runs the same binary, and must not export them.
var registerMetrics = sync.OnceFunc(func() {
	metrics.Registry.MustRegister(auditViolations, auditDaemonSets, auditLastRun, auditDuration, reportWrites, reportFailures)
	for _, op := range []string{"create", "update", "delete"} {
		reportWrites.WithLabelValues(op)
	}
	for _, reason := range []string{"crd_missing", "forbidden", "error"} {
		reportFailures.WithLabelValues(reason)
	}
})

// Auditor runs the audit periodically and reports every finding as an Event on the DaemonSet, as
// metrics and, with Reports set, as OpenReports Reports. Only the holder of the audit's lease runs
// it, so replicas do not multiply the Events.
type Auditor struct {
	Reader   client.Reader
	Engine   *policy.Engine
	Recorder events.EventRecorder
	Interval time.Duration
	Exempt   []string
	// Reports, when set, writes the findings as OpenReports Reports after each pass.
	Reports *ReportWriter
	// ObjectTimeout bounds the evaluation of each DaemonSet (DefaultObjectTimeout when 0).
	ObjectTimeout time.Duration
	Log           logr.Logger
}

// Start audits now, then every Interval until ctx ends.
func (a *Auditor) Start(ctx context.Context) error {
	registerMetrics()
	ticker := time.NewTicker(a.Interval)
	defer ticker.Stop()
	for {
		a.once(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

func (a *Auditor) once(ctx context.Context) {
	start := time.Now()
	set := a.Engine.Set()
	findings, err := RunWithin(ctx, a.Reader, set, a.Exempt, a.ObjectTimeout)
	if err != nil {
		a.Log.Error(err, "Audit failed")
		return
	}
	auditViolations.Reset()
	counts := map[string]float64{"compliant": 0, "violating": 0, "missing_injection": 0, "error": 0, "timeout": 0}
	for _, f := range findings {
		ref := &appsv1.DaemonSet{}
		ref.Namespace, ref.Name = f.Namespace, f.Name
		if err := a.Reader.Get(ctx, client.ObjectKeyFromObject(ref), ref); err != nil {
			continue // deleted since the list
		}
		switch {
		case f.TimedOut:
			counts["timeout"]++
			a.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "AuditTimedOut", "Audit", "%s", f.Error)
			continue
		case f.Error != "":
			counts["error"]++
			a.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "AuditFailed", "Audit", "policies could not be evaluated: %s", f.Error)
			continue
		case len(f.Violations) > 0:
			counts["violating"]++
		default:
			counts["compliant"]++
		}
		if f.MissingInjection {
			counts["missing_injection"]++
			a.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "InjectionMissing", "Audit",
				"the stored pod template lacks what daemonguard's inject policy adds (control-plane tolerations, priority class); re-apply the manifest to get it")
		}
		for _, v := range f.Violations {
			auditViolations.WithLabelValues(v.Policy, string(v.Action)).Inc()
			a.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, "PolicyViolation", "Audit", "%s (%s)", v.String(), v.Action)
		}
	}
	for state, n := range counts {
		auditDaemonSets.WithLabelValues(state).Set(n)
	}
	if a.Reports != nil {
		a.writeReports(ctx, findings, set)
	}
	took := time.Since(start)
	auditDuration.Set(took.Seconds())
	auditLastRun.SetToCurrentTime()
	a.Log.Info("Audit finished", "daemonSets", len(findings), "violating", counts["violating"], "missingInjection", counts["missing_injection"], "duration", took.Round(time.Millisecond).String())
}
