// Package scalebench holds the scale benchmark: daemonguard's webhook, rollout controller, audit
// and pre-flight plan on local control planes of 1,000 to 5,000 fake nodes with about 30 pods per
// node, and how each cost grows with the cluster. See docs/performance.md for how to run it and
// the measured results.
package scalebench
