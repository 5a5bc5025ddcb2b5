// Package rolloutbench holds the macro-benchmarks of daemonguard's managed rollout on a local
// control plane of 100 and 1,000 fake nodes: against the built-in RollingUpdate
// (BenchmarkRolloutVsBuiltin), and with an analysis gate that a real Prometheus measures
// (BenchmarkGatedRollout). See docs/performance.md for how to run them and the measured results.
package rolloutbench
