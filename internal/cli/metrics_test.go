package cli

import (
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The controller runs the same binary as the webhook: linking every package must not register
// the webhook's, the audit's or the self-managed certificate's metrics, or a controller replica
// would export webhook series (daemonguard_webhook_ready at 0, a policy set, an audit that never
// ran). They register when a webhook, an audit or a rotator starts.
func TestNoWebhookMetricsUntilAWebhookRuns(t *testing.T) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		name := f.GetName()
		for _, prefix := range []string{"daemonguard_admission_", "daemonguard_policy_", "daemonguard_webhook_", "daemonguard_audit_"} {
			if strings.HasPrefix(name, prefix) {
				t.Errorf("%s is exported by a process that serves no webhook", name)
			}
		}
	}
}
