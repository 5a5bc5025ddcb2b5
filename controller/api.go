// Package controller is daemonguard's rollout controller: progressive, observable, restart-safe
// rollouts of DaemonSets that opt in with `updateStrategy: {type: OnDelete}` and the annotation
// daemonguard.io/rollout: managed. The built-in DaemonSet controller keeps creating pods at the
// current template revision; this controller only decides which old-revision pods to delete, when,
// and when to stop. Settings are annotations (in git, next to the manifest); state and status live
// on the DaemonSet itself, so a restarted controller resumes from cluster state alone.
package controller

import appsv1 "k8s.io/api/apps/v1"

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
	// "100%" (no canary).
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
)

// Status annotations the controller writes (prefix status.daemonguard.io/, ignored by the
// admission policies). They are the controller's memory across restarts as well as its report.
const (
	StatusPrefix = "status.daemonguard.io/"
	// StatusRevision is the controller-revision-hash the rollout is heading to.
	StatusRevision = StatusPrefix + "revision"
	// StatusStep is "<index>/<count>: <step>", e.g. "3/5: 25%"; index is 1-based.
	StatusStep = StatusPrefix + "step"
	// StatusStepStarted is when the current step started (RFC 3339).
	StatusStepStarted = StatusPrefix + "step-started"
	// StatusPauseToken is the value of AnnotationResume when the current indefinite pause began.
	StatusPauseToken = StatusPrefix + "pause-token"
	// StatusUpdated is "<updated>/<desired>" pods at the target revision and available.
	StatusUpdated = StatusPrefix + "updated"
	// StatusNextNodes names the nodes whose pods are replaced next, and why in that order.
	StatusNextNodes = StatusPrefix + "next-nodes"
	// StatusProgress is "<updated>@<RFC 3339 time>": when the updated count last grew.
	StatusProgress = StatusPrefix + "progress"
	// StatusFailedRevision is the revision whose rollout failed; a new revision clears it.
	StatusFailedRevision = StatusPrefix + "failed-revision"
)

// Condition types set in DaemonSet.status.conditions. Exactly one of them is True at a time on a
// managed DaemonSet; reason and message say why.
const (
	ConditionProgressing appsv1.DaemonSetConditionType = "Progressing"
	ConditionPaused      appsv1.DaemonSetConditionType = "Paused"
	ConditionFailed      appsv1.DaemonSetConditionType = "Failed"
	ConditionComplete    appsv1.DaemonSetConditionType = "Complete"
)
