// Package rolloutplan is the rollout controller's planner, pure and apart from the controller so
// that `daemonguard rollout plan` runs the very same planner without linking the controller
// manager. plan.go classifies what a reconcile read (Observed) into the planner's RolloutState
// (StateOf) and decides which old pods to delete and what to report (Compute, returning a Plan);
// with analysis gates it also says which measurements a reconcile must take first (DueAnalysis)
// and judges them per node of the wave. It holds StripPod, the pod cache transform that keeps
// what StateOf reads. forecast.go runs the planner against a model of the cluster, reconcile by
// reconcile, and records the rollout it would run (Forecast, returning a Timeline); only the
// pre-flight plan uses it.
package rolloutplan
