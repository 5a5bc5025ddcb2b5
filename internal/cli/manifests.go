package cli

import (
	"context"

	"github.com/daemonguard/daemonguard/internal/manifest"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/webhook"
)

// simulate evaluates one DaemonSet document offline as admission would: the inject policy's
// patch applied, the validation policies judging the result. Of the cluster it knows only the
// labels of the Namespace documents in the manifests (manifest.NamespaceLabels).
func simulate(ctx context.Context, set *policy.Set, d manifest.Document, namespaces map[string]map[string]string) webhook.Result {
	ns := d.Namespace
	if ns == "" {
		ns = "default"
	}
	a := &webhook.Admission{Facts: webhook.Facts{
		NamespaceLabels: func(_ context.Context, name string) (map[string]string, error) { return namespaces[name], nil },
	}}
	return a.Simulate(ctx, set, webhook.Review{Operation: policy.OpCheck, Namespace: ns, Object: d.Raw})
}

// simulationError is the error of a simulation that ended without a verdict.
func simulationError(r webhook.Result) error {
	if r.Malformed != nil {
		return r.Malformed
	}
	return r.Failed
}
