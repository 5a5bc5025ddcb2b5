// Package planbench holds the benchmark of `daemonguard rollout plan` on a local control plane of
// 1,000 fake nodes: how long the pre-flight of an image change takes end to end, for a
// RollingUpdate DaemonSet and for a managed one, whose rollout the controller's planner runs
// forward over every node. See docs/performance.md for how to run it and the measured results.
package planbench
