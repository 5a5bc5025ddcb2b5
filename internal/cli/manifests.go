package cli

import (
	"context"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/manifest"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// simulate evaluates one DaemonSet document offline as admission would: the inject policy's
// patch applied, the validation policies judging the result. Of the cluster it knows only the
// labels of the Namespace documents in the manifests (manifest.NamespaceLabels).
func simulate(ctx context.Context, set *policy.Set, d manifest.Document, namespaces map[string]map[string]string) admission.Outcome {
	ns := d.Namespace
	if ns == "" {
		ns = "default"
	}
	a := &admission.Reviewer{FailureMode: admission.FailClosed, Lookups: admission.Lookups{
		NamespaceLabels: func(_ context.Context, name string) (map[string]string, error) { return namespaces[name], nil },
	}}
	return a.Simulate(ctx, set, admission.Review{Operation: policy.OpCheck, Namespace: ns, Object: d.Raw})
}
