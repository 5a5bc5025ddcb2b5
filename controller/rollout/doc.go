// Package rollout is daemonguard's rollout controller: progressive, observable, restart-safe
// rollouts of DaemonSets that opt in with `updateStrategy: {type: OnDelete}` and the annotation
// daemonguard.io/rollout: managed. The built-in DaemonSet controller keeps creating pods at the
// current template revision; this controller only decides which old-revision pods to delete, when,
// and when to stop. Settings are annotations (in git, next to the manifest); state and status live
// on the DaemonSet itself, so a restarted controller resumes from cluster state alone.
//
// One reconcile reads these files: reconciler.go gathers (reads only, into Facts) through the
// Store, which manager.go implements over the informers' caches; decide.go decides what to write
// and report (pure); controller/rolloutplan's state.go classifies the nodes and pods, its plan.go
// plans the deletions as a chain of named checks and plan_analysis.go holds them while a wave is
// measured (pure, plain data and a clock); and apply.go does every write and records the
// metrics. manager.go also wires the process: the cache and its strip
// transforms, the manager with leader election, the watches and the Event broadcaster. The
// settings, the status codec and the rest of the vocabulary are internal/rolloutapi's.
package rollout
