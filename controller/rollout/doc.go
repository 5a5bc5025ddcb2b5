// Package rollout is daemonguard's rollout controller: progressive, observable, restart-safe
// rollouts of DaemonSets that opt in with `updateStrategy: {type: OnDelete}` and the annotation
// daemonguard.io/rollout: managed. The built-in DaemonSet controller keeps creating pods at the
// current template revision; this controller only decides which old-revision pods to delete, when,
// and when to stop. Settings are annotations (in git, next to the manifest); state and status live
// on the DaemonSet itself, so a restarted controller resumes from cluster state alone.
package rollout
