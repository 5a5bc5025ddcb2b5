package rolloutapi

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// Settings: annotations a user writes on the DaemonSet (validated by the rollout_annotations
// policy of the admission webhook).
const (
	// AnnotationRollout opts a DaemonSet in; the only value is "managed".
	AnnotationRollout = "daemonguard.io/rollout"
	// RolloutManaged is the value of AnnotationRollout.
	RolloutManaged = "managed"
	// AnnotationMaxUnavailable is the budget: an integer or a percent of the desired pods,
	// rounded up as upstream does. Default 1.
	AnnotationMaxUnavailable = "daemonguard.io/max-unavailable"
	// AnnotationSteps lists canary steps, e.g. "1,pause:5m,25%,pause,100%": node counts or
	// percents of the desired pods to have updated, timed pauses and indefinite pauses. Default
	// "100%" (no canary). ParseSteps reads it.
	AnnotationSteps = "daemonguard.io/steps"
	// AnnotationPaused pauses the whole rollout when "true".
	AnnotationPaused = "daemonguard.io/paused"
	// AnnotationResume is a token: changing its value resumes an indefinite pause step (commit a
	// new value to git, or `daemonguard rollout resume`).
	AnnotationResume = "daemonguard.io/resume"
	// AnnotationProgressDeadline bounds each step (Go duration). Default 10m.
	AnnotationProgressDeadline = "daemonguard.io/progress-deadline"
	// AnnotationTopologyKey rolls one topology domain (node label value) at a time.
	AnnotationTopologyKey = "daemonguard.io/topology-key"
	// AnnotationBake is how long (Go duration, above 0 and at most MaxBake) a rollout stays
	// Progressing with ReasonBaking once every node runs the revision and its gates have passed,
	// before it is Complete: what Argo CD waits on before the next step of a fleet rollout.
	// None by default: the rollout is Complete at once.
	AnnotationBake = "daemonguard.io/bake"
)

// MaxBake bounds AnnotationBake: a bake is a soak measured in minutes or hours, and a rollout
// held for days is a pause, not a bake. The rollout_annotations policy's max_bake is the same
// bound at admission (a test holds the two equal).
const MaxBake = 24 * time.Hour

// Status annotations the controller writes (prefix status.daemonguard.io/, ignored by the
// admission policies). They are the controller's memory across restarts as well as its report;
// EncodeStatus and DecodeStatus are their one codec.
const (
	StatusPrefix = "status.daemonguard.io/"
	// StatusRevision is the controller-revision-hash the rollout is heading to.
	StatusRevision = StatusPrefix + "revision"
	// StatusStep is "<index>/<count>: <step>", e.g. "3/5: 25%"; index is 1-based, and
	// "<count>/<count>: done" once every step is done.
	StatusStep = StatusPrefix + "step"
	// StatusStepStarted is when the current step started (RFC 3339).
	StatusStepStarted = StatusPrefix + "step-started"
	// StatusPauseToken is the value of AnnotationResume when the current indefinite pause began.
	StatusPauseToken = StatusPrefix + "pause-token"
	// StatusUpdated is "<updated>/<desired>" nodes: reachable nodes whose pod runs the target
	// revision and is available, of the reachable nodes the DaemonSet should run on.
	StatusUpdated = StatusPrefix + "updated"
	// StatusNextNodes names the nodes whose pods are replaced next, and why in that order:
	// "worker-3,worker-4 (<reason>)".
	StatusNextNodes = StatusPrefix + "next-nodes"
	// StatusProgress is "<updated>@<RFC 3339 time>": when the updated count last grew.
	StatusProgress = StatusPrefix + "progress"
	// StatusFailedRevision is the revision whose rollout failed; a new revision clears it.
	StatusFailedRevision = StatusPrefix + "failed-revision"
	// StatusCompletedAt is when every node first ran the revision and its gates had passed (RFC
	// 3339), written only under AnnotationBake: the bake runs from it. A new revision clears it.
	StatusCompletedAt = StatusPrefix + "completed-at"
)

// Condition types set in DaemonSet.status.conditions. Exactly one of them is True at a time on a
// managed DaemonSet; reason and message say why.
const (
	ConditionProgressing appsv1.DaemonSetConditionType = "Progressing"
	ConditionPaused      appsv1.DaemonSetConditionType = "Paused"
	ConditionFailed      appsv1.DaemonSetConditionType = "Failed"
	ConditionComplete    appsv1.DaemonSetConditionType = "Complete"
)

// RolloutConditions are the condition types of the rollout, in the order they are written.
var RolloutConditions = []appsv1.DaemonSetConditionType{ConditionProgressing, ConditionPaused, ConditionFailed, ConditionComplete}

// ReasonInvalidSettings is the Failed reason for settings annotations the controller cannot
// parse. It is about the settings, not a revision: no new template clears it, only fixed settings.
const ReasonInvalidSettings = "InvalidSettings"

// Reasons of the Failed condition the rollout controller sets when it halts the rollout of a
// revision; a new template clears them.
const (
	// ReasonPodFailure: new pods fail for a reason that will not fix itself (ImagePullBackOff, ...).
	ReasonPodFailure = "PodFailure"
	// ReasonProgressDeadline: new pods did not become available within the progress deadline.
	ReasonProgressDeadline = "ProgressDeadlineExceeded"
	// ReasonRolloutFailed: the revision failed earlier, for a reason not known any more.
	ReasonRolloutFailed = "RolloutFailed"
)

// Reasons of the other conditions the rollout controller sets.
const (
	// ReasonProgressing (Progressing): pods are being replaced within the budget and the step.
	ReasonProgressing = "RolloutProgressing"
	// ReasonBaking (Progressing): every node runs the revision and its gates have passed, and
	// AnnotationBake has not yet passed since StatusCompletedAt.
	ReasonBaking = "Baking"
	// ReasonPausedByAnnotation (Paused): AnnotationPaused is "true".
	ReasonPausedByAnnotation = "PausedByAnnotation"
	// ReasonTimedPause (Paused): a "pause:<duration>" step has not ended.
	ReasonTimedPause = "TimedPause"
	// ReasonPausedAtStep (Paused): a "pause" step waits for AnnotationResume to change.
	ReasonPausedAtStep = "PausedAtStep"
	// ReasonComplete (Complete): every reachable node runs an available pod of the revision.
	ReasonComplete = "RolloutComplete"
)

// Reasons of the Events the rollout controller records on a managed DaemonSet when the phase,
// reason or step changes; the Event's note is the condition's message.
const (
	EventProgressing = "RolloutProgressing"
	EventPaused      = "RolloutPaused"
	EventFailed      = "RolloutFailed"
	EventComplete    = "RolloutComplete"
)

// Phase classifies a rollout's state. The controller reports the four phases named after its
// conditions; a reader adds Waiting and NotRolling.
type Phase string

// Phases.
const (
	// PhaseProgressing: pods are being replaced.
	PhaseProgressing = Phase(ConditionProgressing)
	// PhasePaused: the rollout controller holds the rollout (paused annotation or a pause step).
	PhasePaused = Phase(ConditionPaused)
	// PhaseFailed: the rollout controller gave up (progress deadline exceeded, failing pods, ...).
	PhaseFailed = Phase(ConditionFailed)
	// PhaseComplete: every desired pod runs the current template and is available.
	PhaseComplete = Phase(ConditionComplete)
	// PhaseWaiting: a controller has not yet acted on the current spec (or reported on it).
	PhaseWaiting Phase = "Waiting"
	// PhaseNotRolling: an unmanaged OnDelete DaemonSet; nothing rolls it out.
	PhaseNotRolling Phase = "NotRolling"
)

// IsManaged tells whether daemonguard's rollout controller rolls the DaemonSet out: it opts in
// (IsOptedIn) and uses the OnDelete strategy (with RollingUpdate the built-in controller rolls the
// pods itself). The policies' lib.rollout_managed is the same rule in Rego; a test holds the two
// together.
func IsManaged(ds *appsv1.DaemonSet) bool {
	return IsOptedIn(ds) && ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
}

// IsOptedIn tells whether the DaemonSet carries AnnotationRollout: RolloutManaged, whatever its
// strategy: opted in but not managed, it is a misconfiguration the CLI and the policies name.
func IsOptedIn(ds *appsv1.DaemonSet) bool {
	return ds.Annotations[AnnotationRollout] == RolloutManaged
}

// MaxGates is the most analysis gates a DaemonSet may list: each gate is a Prometheus query made
// with the controller's credentials at every interval. ParseGates refuses more; the
// rollout_annotations policy's max_gates is the same bound at admission (keep the two equal).
const MaxGates = 10

// Size limits of the annotations daemonguard reads, in bytes of the value. Each is a few times
// the largest value that is valid, so that no valid value comes near it, and small enough that
// checking a value costs nothing next to the work it would cause: the admission core refuses an
// object with a value past its limit before any policy runs (admission.AnnotationLimitsPolicy),
// and every parser here refuses it before reading it (CheckAnnotationSize), so that neither the
// policies nor the controller ever parse a value a tenant made huge.
const (
	// limitToken is for enum-like and short values: "managed", "true", "25%", "10m", a resume
	// token (at most 63 characters at admission), a revision hash, an RFC 3339 time, "12/40".
	limitToken = 256
	// limitLabelKey is for a label key: a DNS subdomain prefix (253) + "/" + a name (63) is 317.
	limitLabelKey = 512
	// limitSteps: 100 distinct percent steps "1%,...,100%" are 392 bytes, and each pause
	// ("pause:8760h") between them adds 12; 1 KiB holds any canary a person would write.
	limitSteps = 1 << 10
	// limitReason is for free text a person writes (the on-delete exemption's reason).
	limitReason = 1 << 10
	// limitAnalysis: MaxGates gates, each a PromQL query of up to a kilobyte or so plus its
	// fields (name, max, min, interval, count, nodeLabel, baseline: about 150 bytes of YAML).
	limitAnalysis = 16 << 10
	// limitStatusStep is "<index>/<count>: <step>", a step being at most limitSteps long.
	limitStatusStep = limitSteps + 32
	// limitStatusNextNodes: at most five node names (DNS subdomains, 253 bytes each) and the
	// reason of their order.
	limitStatusNextNodes = 2 << 10
	// limitStatusAnalysis: the analysis of a wave as JSON, with each of MaxGates gates' last
	// measurement, whose message names a few nodes and their values (under 2 KiB each).
	limitStatusAnalysis = 32 << 10
)

// annotationLimits is the one table of the size limits: every annotation daemonguard reads, the
// settings a user writes and the status the controller writes.
var annotationLimits = map[string]int{
	AnnotationRollout:           limitToken,
	AnnotationMaxUnavailable:    limitToken,
	AnnotationSteps:             limitSteps,
	AnnotationPaused:            limitToken,
	AnnotationResume:            limitToken,
	AnnotationProgressDeadline:  limitToken,
	AnnotationTopologyKey:       limitLabelKey,
	AnnotationBake:              limitToken,
	AnnotationAnalysis:          limitAnalysis,
	AnnotationOnAnalysisFailure: limitToken,
	AnnotationInject:            limitToken,
	AnnotationOnDeleteExempt:    limitReason,

	StatusRevision:       limitToken,
	StatusStep:           limitStatusStep,
	StatusStepStarted:    limitToken,
	StatusPauseToken:     limitToken,
	StatusUpdated:        limitToken,
	StatusNextNodes:      limitStatusNextNodes,
	StatusProgress:       limitToken,
	StatusFailedRevision: limitToken,
	StatusCompletedAt:    limitToken,
	StatusAnalysis:       limitStatusAnalysis,
}

// Annotations only the admission policies read; defined here so that the size table covers every
// key the rollout_annotations policy knows.
const (
	// AnnotationInject "false" opts a DaemonSet out of injection (admission.OptOutAnnotation).
	AnnotationInject = "daemonguard.io/inject"
	// AnnotationOnDeleteExempt gives the reason an OnDelete DaemonSet is not rolled out by
	// daemonguard (read by the policies).
	AnnotationOnDeleteExempt = "daemonguard.io/on-delete-exempt"
)

// AnnotationLimit is the size limit of an annotation daemonguard reads, in bytes; false for a
// key it does not read.
func AnnotationLimit(key string) (int, bool) {
	n, ok := annotationLimits[key]
	return n, ok
}

// limitedKeys are annotationLimits' keys, sorted, so that the first value past its limit is
// always the same one.
var limitedKeys = func() []string {
	keys := make([]string, 0, len(annotationLimits))
	for k := range annotationLimits {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}()

// LimitedAnnotations are the keys with a size limit, sorted.
func LimitedAnnotations() []string { return slices.Clone(limitedKeys) }

// AnnotationTooLargeError is an annotation value past its size limit.
type AnnotationTooLargeError struct {
	Key         string
	Size, Limit int
}

func (e *AnnotationTooLargeError) Error() string {
	return fmt.Sprintf("annotation %s is %d bytes, over its limit of %d bytes", e.Key, e.Size, e.Limit)
}

// CheckAnnotationSize refuses a value of key past the key's limit with an
// *AnnotationTooLargeError; keys without a limit pass.
func CheckAnnotationSize(key, value string) error {
	if limit, ok := annotationLimits[key]; ok && len(value) > limit {
		return &AnnotationTooLargeError{Key: key, Size: len(value), Limit: limit}
	}
	return nil
}

// CheckAnnotationSizes refuses the first annotation, in key order, whose value is past its limit.
func CheckAnnotationSizes(annotations map[string]string) error {
	return checkSizes(annotations, true)
}

// checkSizes is CheckAnnotationSizes, over the status annotations too when withStatus.
func checkSizes(annotations map[string]string, withStatus bool) error {
	for _, k := range limitedKeys {
		if v, ok := annotations[k]; ok && (withStatus || !strings.HasPrefix(k, StatusPrefix)) {
			if err := CheckAnnotationSize(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}
