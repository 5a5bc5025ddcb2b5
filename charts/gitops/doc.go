// Package gitops proves daemonguard under a real Argo CD on the local control plane: Argo CD's
// application controller and repo server (built from the Go module proxy by tools/argocd) sync
// the chart, a policy ConfigMap and the seed DaemonSets from a local git repository with the
// Application and argocd-cm health checks of testdata/argocd, while daemonguard's webhook and
// rollout controller run on the host with the arguments and ServiceAccounts Argo CD gave their
// Deployments (the chart's URL mode). The tests commit to that repository and watch what Argo CD
// reports.
package gitops
