// Package rolloutplan is the rollout controller's planner, pure and apart from the controller so
// that `daemonguard rollout plan` runs the very same planner without linking the controller
// manager. It takes plain data and the reconcile's one reading of the clock, never a client, in
// three rooms:
//   - state.go classifies what a reconcile read (Observed) into the planner's RolloutState
//     (StateOf), remembers its classifications from one reconcile to the next (Memo), so that a
//     reconcile classifies only what changed, and holds StripPod, the pod cache transform that
//     keeps what StateOf reads;
//   - plan.go decides which old pods to delete and what to report (Compute, returning a Plan);
//   - plan_analysis.go, with analysis gates, says which measurements a reconcile must take first
//     (DueAnalysis) and holds the rollout while each wave is measured and judged; the gates'
//     vocabulary and judgement are internal/rolloutanalysis's, shared with the Prometheus
//     client.
//
// forecast.go runs the planner against a model of the cluster, reconcile by reconcile, and
// records the rollout it would run (Forecast, returning a Timeline); only the pre-flight plan uses
// it.
package rolloutplan
