// Package rollout is daemonguard's rollout controller: progressive, observable, restart-safe
// rollouts of DaemonSets that opt in with `updateStrategy: {type: OnDelete}` and the annotation
// daemonguard.io/rollout: managed. The built-in DaemonSet controller keeps creating pods at the
// current template revision; this controller only decides which old-revision pods to delete, when,
// and when to stop. Settings are annotations (in git, next to the manifest); state and status live
// on the DaemonSet itself, so a restarted controller resumes from cluster state alone.
//
// One reconcile reads four files: reconciler.go gathers (reads only, into Facts), decide.go
// classifies nodes and pods and decides what to write and report (pure), plan.go plans the
// deletions as a chain of named checks (pure, plain data and a clock), and apply.go does every
// write and records the metrics. The settings, the status codec and the rest of the vocabulary
// are internal/rolloutapi's; manager.go wires the controller into a process.
package rollout
