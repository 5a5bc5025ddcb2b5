package admission

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// The daemonguard.io keys of admission, each defined here once. The rollout controller's keys
// are in internal/rolloutapi.
const (
	// IgnoreLabel opts a DaemonSet out of injection (the mutating webhook's objectSelector). It
	// never opts out of validation or the audit: the label is the object's own, so whoever may
	// write the DaemonSet may set it, and only administrators exempt anything from validation
	// (per namespace, ExemptNamespaces).
	IgnoreLabel = "daemonguard.io/ignore"
	// NodeAgentsLabel, with the value "true" on a Namespace, is an administrator's grant that the
	// DaemonSets of that namespace are node agents: only there does admission inject what the
	// inject policy decides (control-plane tolerations, a critical priority class). Everything
	// else gets the pod pin and validation, nothing that raises its priority or widens where it
	// runs. The chart's ValidatingAdmissionPolicy (NamespaceLabelGuard) keeps tenants from
	// setting it on their own namespaces.
	NodeAgentsLabel = "daemonguard.io/node-agents"
	// GuardedLabelPrefix is the prefix of the Namespace labels only administrators may add, change
	// or remove: NodeAgentsLabel, and any label an administrator's namespace classes or
	// namespaceSelector read (keep those under this prefix so tenants cannot pick their class).
	GuardedLabelPrefix = "daemonguard.io/"
	// OptOutAnnotation opts a DaemonSet out of injection (read by the inject policy).
	OptOutAnnotation = rolloutapi.AnnotationInject
	// PolicyConfigMapLabel selects the ConfigMaps (in the webhook's namespace) that carry extra or
	// replacement Rego policies and parameters; Argo CD syncs them from git.
	PolicyConfigMapLabel = "daemonguard.io/policy"
	// PolicyErrorAnnotation is set by the webhook on a policy ConfigMap whose Rego or parameters made
	// the policy set fail to load, and removed once the set loads again (or the error no longer
	// names the ConfigMap). Its value is one line: the first error in this ConfigMap with its file
	// and line, how many more there are, the digest of the rejected data (see internal/webhookserver) and that
	// the last good set keeps serving. Argo CD shows the ConfigMap Degraded with this text when its
	// argocd-cm carries daemonguard's ConfigMap health check (charts/argocd).
	PolicyErrorAnnotation = "status.daemonguard.io/policy-error"
)

// The names of daemonguard's DaemonSet webhooks, defined here once: webhook.Configurations
// registers them (and charts/webhook_test.go holds the chart's to those), and `rollout plan`
// finds daemonguard's admission in a cluster by them without linking the HTTP adapters.
const (
	MutateDaemonSetWebhook   = "daemonsets.mutate.daemonguard.io"
	ValidateDaemonSetWebhook = "daemonsets.validate.daemonguard.io"
)

// ExemptNamespaces are the namespaces admission never acts on: daemonguard's own (own, when
// known), kube-system and the extra ones configured. The webhook configurations' namespace
// selector, the core (Reviewer.Exempt), the pod pin handler, the in-process policy's binding and
// the audit all take this list.
func ExemptNamespaces(own string, extra []string) []string {
	var out []string
	if own != "" {
		out = append(out, own)
	}
	return append(append(out, metav1.NamespaceSystem), extra...)
}

// PolicySources are the policy ConfigMaps as policy sources, each named configmap/NAME: the
// name the webhook's errors, events and the ConfigMap error annotation use.
func PolicySources(cms []corev1.ConfigMap) []policy.Source {
	sources := make([]policy.Source, len(cms))
	for i, cm := range cms {
		sources[i] = policy.Source{Name: "configmap/" + cm.Name, Files: cm.Data}
	}
	return sources
}
