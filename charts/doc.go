// Package charts holds the tests of the Helm chart in charts/daemonguard. They render the chart
// with the helm binary built from tools/helm (no cluster needed) and check that it lints, that
// its manifests match the goldens in testdata/golden (UPDATE_GOLDEN=1 rewrites them), that the
// values schema rejects mistyped keys and values, that its pods meet the restricted Pod Security
// Standard, that its RBAC is least-privilege and covers what the binary calls, that its webhook
// configurations are exactly what webhook.Configurations returns, that the container
// arguments are flags the daemonguard binary accepts, and that the README's
// `helm template ... | daemonguard check -f -` works as written (no --kube-version), and that the
// alert rules pass their promtool tests and reach the PrometheusRule and the dashboard its ConfigMap
// as written.
package charts
