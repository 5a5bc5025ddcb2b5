// Package rolloutapi is the rollout API that daemonguard's rollout controller, the CLI, the
// admission webhook and the audit share: the annotation keys a user writes (settings) and the
// controller writes (status), the parser of the settings (ParseSettings, with the syntax of
// daemonguard.io/steps), the codec of the status.daemonguard.io/ annotations, the size limit of
// every annotation daemonguard reads (annotations.go, which every parser here applies first and
// the admission core applies before any policy), which DaemonSets are managed (IsManaged), the lookup of a DaemonSet's newest revision, and the rollout Phase
// with its conditions. It holds vocabulary and pure functions only: no client, no clock.
package rolloutapi
