package rolloutcli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// ChangeCauseAnnotation is copied by the DaemonSet controller from the DaemonSet to each new
// ControllerRevision; `history` shows it.
const ChangeCauseAnnotation = "kubernetes.io/change-cause"

// Revisions lists the ControllerRevisions the DaemonSet controls (owner reference with its UID,
// not just a matching selector), sorted by .revision.
func Revisions(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	selector, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("selector of daemon set %q: %w", ds.Name, err)
	}
	list, err := c.AppsV1().ControllerRevisions(ds.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, fmt.Errorf("list ControllerRevisions of daemon set %q: %w", ds.Name, err)
	}
	var revs []*appsv1.ControllerRevision
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], ds) {
			revs = append(revs, &list.Items[i])
		}
	}
	SortRevisions(revs)
	return revs, nil
}

// SortRevisions sorts by .revision, then by name for a stable order.
func SortRevisions(revs []*appsv1.ControllerRevision) {
	slices.SortFunc(revs, func(a, b *appsv1.ControllerRevision) int {
		if a.Revision != b.Revision {
			return compare(a.Revision, b.Revision)
		}
		return compare(a.Name, b.Name)
	})
}

func compare[T int64 | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CurrentRevision returns the revision number recording ds's current template: the matching
// revision, else (the DaemonSet controller has synced the spec, so the newest revision is
// current by construction) the newest one, else 0.
func CurrentRevision(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision) (int64, error) {
	var current int64
	for _, r := range revs {
		ok, err := rolloutapi.RevisionMatches(ds, r)
		if err != nil {
			return 0, err
		}
		if ok && r.Revision > current {
			current = r.Revision
		}
	}
	if current == 0 && len(revs) > 0 && ds.Status.ObservedGeneration >= ds.Generation {
		for _, r := range revs {
			current = max(current, r.Revision)
		}
	}
	return current, nil
}

// UndoTarget picks the revision `undo` restores, out of the DaemonSet's revision numbers.
// toRevision > 0 must exist. toRevision == 0 means the revision before current: the newest one
// older than current, else the newest one other than current; with current unknown (0; the
// DaemonSet controller has not recorded the current template yet) the newest one, which is the
// template in force before the change.
func UndoTarget(revisions []int64, current, toRevision int64) (int64, error) {
	if toRevision < 0 {
		return 0, fmt.Errorf("unable to find specified revision %d in history", toRevision)
	}
	if toRevision > 0 {
		if !slices.Contains(revisions, toRevision) {
			return 0, fmt.Errorf("unable to find specified revision %d in history", toRevision)
		}
		return toRevision, nil
	}
	var older, other int64
	for _, r := range revisions {
		if r == current {
			continue
		}
		other = max(other, r)
		if current == 0 || r < current {
			older = max(older, r)
		}
	}
	switch {
	case older > 0:
		return older, nil
	case other > 0:
		return other, nil
	}
	return 0, fmt.Errorf("no last revision to roll back to")
}

// TemplateYAML renders a pod template for a person.
func TemplateYAML(t *corev1.PodTemplateSpec) (string, error) {
	b, err := yaml.Marshal(t)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// PrintHistory writes the revision table of `kubectl rollout history`.
func PrintHistory(w io.Writer, revs []*appsv1.ControllerRevision) error {
	if len(revs) == 0 {
		_, err := fmt.Fprintln(w, "No rollout history found.")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tCHANGE-CAUSE")
	for _, r := range revs {
		cause := r.Annotations[ChangeCauseAnnotation]
		if cause == "" {
			cause = "<none>"
		}
		fmt.Fprintf(tw, "%d\t%s\n", r.Revision, cause)
	}
	return tw.Flush()
}

// UndoResult says what Undo did.
type UndoResult struct {
	From, To int64 // current revision (0 if unknown) and restored revision
	Skipped  bool  // the current template already matches To
	Template *corev1.PodTemplateSpec
}

// DryRunMode selects how Undo and the patching commands treat the cluster.
type DryRunMode string

const (
	DryRunNone   DryRunMode = "none"
	DryRunClient DryRunMode = "client" // compute and print, do not send
	DryRunServer DryRunMode = "server" // send with dryRun=All: validated and admitted, not persisted
)

// Undo restores a revision of the DaemonSet like `kubectl rollout undo ds`: it patches the
// DaemonSet with the revision's data (a strategic merge patch replacing spec.template), so the
// DaemonSet controller records the restored template as a new, highest revision.
func Undo(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet, toRevision int64, dryRun DryRunMode) (UndoResult, error) {
	revs, err := Revisions(ctx, c, ds)
	if err != nil {
		return UndoResult{}, err
	}
	current, err := CurrentRevision(ds, revs)
	if err != nil {
		return UndoResult{}, err
	}
	numbers := make([]int64, len(revs))
	for i, r := range revs {
		numbers[i] = r.Revision
	}
	to, err := UndoTarget(numbers, current, toRevision)
	if err != nil {
		return UndoResult{}, err
	}
	var target *appsv1.ControllerRevision
	for _, r := range revs {
		if r.Revision == to {
			target = r
		}
	}
	res := UndoResult{From: current, To: to}
	if res.Template, err = rolloutapi.RevisionTemplate(ds, target); err != nil {
		return res, err
	}
	if res.Skipped, err = rolloutapi.RevisionMatches(ds, target); err != nil || res.Skipped {
		return res, err
	}
	if dryRun == DryRunClient {
		return res, nil
	}
	opts := metav1.PatchOptions{}
	if dryRun == DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	// No precondition: the rollout controller writes its status annotations throughout a
	// rollout, when an undo is most needed, and the patch replaces only the template.
	patch, err := rolloutapi.RestorePatch(target, "")
	if err != nil {
		return res, err
	}
	if _, err := c.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, types.StrategicMergePatchType, patch, opts); err != nil {
		return res, fmt.Errorf("failed restoring revision %d: %w", to, err)
	}
	return res, nil
}
