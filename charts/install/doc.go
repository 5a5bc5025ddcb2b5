// Package install proves the Helm chart on the local control plane: helm installs and upgrades
// it, the daemonguard binary runs on the host with the identity and arguments the chart gives its
// pods (the chart's URL mode points the webhook configurations at it), the API server calls the
// webhook over TLS from cert-manager or from daemonguard's self-managed CA, and re-applied
// DaemonSets show no drift under server-side diff.
package install
