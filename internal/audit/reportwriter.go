package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daemonguard/daemonguard/internal/policy"
)

var (
	reportWrites   = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "daemonguard_audit_report_writes_total", Help: "OpenReports Report writes by the audit, by operation (create, update, delete)."}, []string{"operation"})
	reportFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "daemonguard_audit_report_failures_total", Help: "Audit passes whose OpenReports Reports could not all be written, by reason (crd_missing, forbidden, error)."}, []string{"reason"})
)

// ReportWriter keeps the OpenReports Reports in step with the audit's findings: it lists the
// Reports labelled as daemonguard's, decides the desired ones (Reports, PlanReports) and writes
// the difference. It reads with plain list requests, one per pass, rather than a watch: the
// Reports are only needed at that moment.
type ReportWriter struct {
	Client client.Client // knows the openreports.io/v1alpha1 types
	Now    func() time.Time
}

// NewReportWriter returns a ReportWriter with a client for cfg. It makes no request: a missing
// CRD or permission shows up in Write, as an error that says which.
func NewReportWriter(cfg *rest.Config) (*ReportWriter, error) {
	registerMetrics()
	scheme := runtime.NewScheme()
	if err := openreports.Install(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create OpenReports client: %w", err)
	}
	return &ReportWriter{Client: c, Now: time.Now}, nil
}

// Write brings the daemonguard Reports of the cluster in line with findings, evaluated with set.
// It returns what it changed; on an error it still makes every write it can, and the error names
// the missing CRD or permission when that is the cause (see ReportFailureReason).
func (w *ReportWriter) Write(ctx context.Context, findings []Finding, set *policy.Set) (ReportChanges, error) {
	var existing openreports.ReportList
	if err := w.Client.List(ctx, &existing, client.MatchingLabels{ManagedByLabel: ManagedByValue}); err != nil {
		return ReportChanges{}, describeReportError("list Reports", err)
	}
	changes := PlanReports(existing.Items, Reports(findings, PolicyActions(set), w.Now()))
	var errs []error
	for i := range changes.Create {
		if err := w.Client.Create(ctx, &changes.Create[i]); err != nil {
			if namespaceGone(err) {
				continue // the namespace goes, and its DaemonSets with it: nothing to report
			}
			errs = append(errs, describeReportError("create Report "+key(&changes.Create[i]), err))
			continue
		}
		reportWrites.WithLabelValues("create").Inc()
	}
	for i := range changes.Update {
		if err := w.Client.Update(ctx, &changes.Update[i]); err != nil {
			if namespaceGone(err) {
				continue
			}
			errs = append(errs, describeReportError("update Report "+key(&changes.Update[i]), err))
			continue
		}
		reportWrites.WithLabelValues("update").Inc()
	}
	for i := range changes.Delete {
		if err := w.Client.Delete(ctx, &changes.Delete[i]); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, describeReportError("delete Report "+key(&changes.Delete[i]), err))
			continue
		}
		reportWrites.WithLabelValues("delete").Inc()
	}
	return changes, errors.Join(errs...)
}

// namespaceGone tells a write refused because the Report's namespace is being deleted or is gone
// (the audit listed its DaemonSets a moment before).
func namespaceGone(err error) bool {
	return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) || apierrors.IsNotFound(err)
}

func key(r *openreports.Report) string { return r.Namespace + "/" + r.Name }

// ErrReportsCRDMissing and ErrReportsForbidden tell the two configuration errors apart from
// passing failures; Write's errors wrap them.
var (
	ErrReportsCRDMissing = errors.New("the OpenReports CRD reports.openreports.io (openreports.io/v1alpha1) is not installed: " +
		"install it with the chart value openReports.installCRD=true, or from github.com/openreports/reports-api config/crd")
	ErrReportsForbidden = errors.New("forbidden: the audit needs list, create, update and delete on reports.openreports.io " +
		"in all namespaces (the chart grants them with openReports.enabled=true)")
)

func describeReportError(what string, err error) error {
	switch {
	case meta.IsNoMatchError(err) || (apierrors.IsNotFound(err) && what == "list Reports"):
		return fmt.Errorf("%s: %w: %w", what, ErrReportsCRDMissing, err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%s: %w: %w", what, ErrReportsForbidden, err)
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("%s: a Report of that name without the label %s=%s exists; daemonguard leaves it alone: %w", what, ManagedByLabel, ManagedByValue, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// ReportFailureReason is the metric label of a Write error: crd_missing, forbidden or error.
func ReportFailureReason(err error) string {
	switch {
	case errors.Is(err, ErrReportsCRDMissing):
		return "crd_missing"
	case errors.Is(err, ErrReportsForbidden):
		return "forbidden"
	}
	return "error"
}

// writeReports runs one Write for the Auditor: failures are logged and counted, never fatal, and
// never keep the Events and metrics of the pass from being reported.
func (a *Auditor) writeReports(ctx context.Context, findings []Finding, set *policy.Set) {
	changes, err := a.Reports.Write(ctx, findings, set)
	if err != nil {
		reason := ReportFailureReason(err)
		reportFailures.WithLabelValues(reason).Inc()
		a.Log.Error(err, "OpenReports Reports not (all) written", "reason", reason)
		return
	}
	if !changes.Empty() {
		a.Log.Info("OpenReports Reports written", "changes", changes.String())
	}
}
