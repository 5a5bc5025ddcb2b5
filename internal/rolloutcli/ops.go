package rolloutcli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// RestartedAtAnnotation is the pod template annotation `kubectl rollout restart` sets.
const RestartedAtAnnotation = "kubectl.kubernetes.io/restartedAt"

// ErrNotManaged explains why pause and resume refuse a DaemonSet the built-in controller rolls out.
type ErrNotManaged struct {
	Name, Verb string
	Strategy   appsv1.DaemonSetUpdateStrategyType
	Annotated  bool // has daemonguard.io/rollout: managed (with a strategy other than OnDelete)
}

func (e *ErrNotManaged) Error() string {
	why := fmt.Sprintf("it lacks the annotation %s: %q", rolloutapi.AnnotationRollout, rolloutapi.RolloutManaged)
	if e.Annotated {
		why = fmt.Sprintf("its updateStrategy is %s, and daemonguard manages only OnDelete DaemonSets", e.Strategy)
	}
	return fmt.Sprintf("cannot %s daemon set %q: it is not managed by daemonguard's rollout controller (%s), and the built-in DaemonSet controller cannot pause a rollout. "+
		"To opt in, set updateStrategy.type: OnDelete and the annotation %s: %q in its manifest",
		e.Verb, e.Name, why, rolloutapi.AnnotationRollout, rolloutapi.RolloutManaged)
}

// checkManaged returns *ErrNotManaged unless daemonguard's rollout controller rolls ds out.
func checkManaged(ds *appsv1.DaemonSet, verb string) error {
	if rolloutapi.IsManaged(ds) {
		return nil
	}
	strategy := ds.Spec.UpdateStrategy.Type
	if strategy == "" {
		strategy = appsv1.RollingUpdateDaemonSetStrategyType
	}
	return &ErrNotManaged{Name: ds.Name, Verb: verb, Strategy: strategy,
		Annotated: rolloutapi.IsOptedIn(ds)}
}

// AnnotationsPatch is a JSON merge patch setting metadata.annotations.
func AnnotationsPatch(annotations map[string]string) ([]byte, error) {
	return json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
}

// ResumeToken is a new value for daemonguard.io/resume: the time in RFC 3339 with nanoseconds,
// made different from previous even if the clock has not moved.
func ResumeToken(now time.Time, previous string) string {
	now = now.UTC()
	token := now.Format(time.RFC3339Nano)
	for token == previous {
		now = now.Add(time.Nanosecond)
		token = now.Format(time.RFC3339Nano)
	}
	return token
}

// RestartPatch is the strategic merge patch of `kubectl rollout restart`.
func RestartPatch(now time.Time) ([]byte, error) {
	return json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{RestartedAtAnnotation: now.Format(time.RFC3339)},
	}}}})
}

// PauseResult says what Pause or Resume changed.
type PauseResult struct {
	Unchanged bool   // pause: already paused
	Token     string // resume: the new resume token
}

// Pause sets daemonguard.io/paused: "true" on a managed DaemonSet.
func Pause(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet, dryRun DryRunMode) (PauseResult, error) {
	if err := checkManaged(ds, "pause"); err != nil {
		return PauseResult{}, err
	}
	if ds.Annotations[rolloutapi.AnnotationPaused] == "true" {
		return PauseResult{Unchanged: true}, nil
	}
	return PauseResult{}, patchAnnotations(ctx, c, ds, map[string]string{rolloutapi.AnnotationPaused: "true"}, dryRun)
}

// Resume sets daemonguard.io/paused: "false" and a new daemonguard.io/resume token, which also
// ends an indefinite pause step.
func Resume(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet, now time.Time, dryRun DryRunMode) (PauseResult, error) {
	if err := checkManaged(ds, "resume"); err != nil {
		return PauseResult{}, err
	}
	token := ResumeToken(now, ds.Annotations[rolloutapi.AnnotationResume])
	return PauseResult{Token: token}, patchAnnotations(ctx, c, ds, map[string]string{
		rolloutapi.AnnotationPaused: "false",
		rolloutapi.AnnotationResume: token,
	}, dryRun)
}

func patchAnnotations(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet, annotations map[string]string, dryRun DryRunMode) error {
	patch, err := AnnotationsPatch(annotations)
	return patchDaemonSet(ctx, c, ds, types.MergePatchType, patch, err, dryRun)
}

// Restart sets the restartedAt pod template annotation, so the template changes and the DaemonSet
// (managed or not) rolls every pod, like `kubectl rollout restart`.
func Restart(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet, now time.Time, dryRun DryRunMode) error {
	patch, err := RestartPatch(now)
	return patchDaemonSet(ctx, c, ds, types.StrategicMergePatchType, patch, err, dryRun)
}

// patchDaemonSet sends a patch the caller built (or the error building it), unless the dry run
// is the client's.
func patchDaemonSet(ctx context.Context, c kubernetes.Interface, ds *appsv1.DaemonSet, pt types.PatchType, patch []byte, buildErr error, dryRun DryRunMode) error {
	if dryRun == DryRunClient || buildErr != nil {
		return buildErr
	}
	_, err := c.AppsV1().DaemonSets(ds.Namespace).Patch(ctx, ds.Name, pt, patch, patchOptions(dryRun))
	return err
}

func patchOptions(dryRun DryRunMode) metav1.PatchOptions {
	if dryRun == DryRunServer {
		return metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	}
	return metav1.PatchOptions{}
}

// GitOps names the tool that appears to sync the DaemonSet from git, and the evidence.
type GitOps struct {
	Tool     string // "Argo CD" or "Flux"
	Evidence string // e.g. `annotation argocd.argoproj.io/tracking-id`
}

// DetectGitOps looks for the marks Argo CD and Flux leave on the objects they sync: Argo CD's
// argocd.argoproj.io/ annotations and labels, and its default tracking label
// app.kubernetes.io/instance (unless Helm itself installed the object, as told by
// meta.helm.sh/release-name); Flux's kustomize.toolkit.fluxcd.io/ and helm.toolkit.fluxcd.io/ labels.
func DetectGitOps(meta metav1.Object) (GitOps, bool) {
	type source struct {
		kind string
		m    map[string]string
	}
	for _, src := range []source{{"annotation", meta.GetAnnotations()}, {"label", meta.GetLabels()}} {
		for _, k := range sortedKeys(src.m) {
			switch {
			case strings.HasPrefix(k, "argocd.argoproj.io/"):
				return GitOps{Tool: "Argo CD", Evidence: src.kind + " " + k}, true
			case strings.HasPrefix(k, "kustomize.toolkit.fluxcd.io/"), strings.HasPrefix(k, "helm.toolkit.fluxcd.io/"):
				return GitOps{Tool: "Flux", Evidence: src.kind + " " + k}, true
			}
		}
	}
	if v, ok := meta.GetLabels()["app.kubernetes.io/instance"]; ok && meta.GetAnnotations()["meta.helm.sh/release-name"] == "" {
		return GitOps{Tool: "Argo CD", Evidence: fmt.Sprintf("label app.kubernetes.io/instance=%s, Argo CD's default tracking label", v)}, true
	}
	return GitOps{}, false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
