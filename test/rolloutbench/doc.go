// Package rolloutbench holds the macro-benchmark that compares daemonguard's managed rollout with
// the built-in RollingUpdate on a local control plane of 100 and 1,000 fake nodes. See
// docs/rollouts.md for how to run it and the measured results.
package rolloutbench
