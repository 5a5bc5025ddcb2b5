package webhook

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/admission"
)

// ConfigurationOptions say how the API server reaches daemonguard's webhooks.
type ConfigurationOptions struct {
	Name string // name of both configuration objects
	// URL is the base URL for out-of-cluster runs (the daemonguard binary on the host); when empty
	// Service is used.
	URL      string
	Service  *admissionregistrationv1.ServiceReference // path is filled in per webhook
	CABundle []byte
	// Namespace is daemonguard's own namespace; it and kube-system are never sent to the webhooks,
	// so a broken daemonguard can never block its own recovery or the cluster's system pods.
	Namespace        string
	ExemptNamespaces []string
	// FailurePolicy and TimeoutSeconds apply to the DaemonSet webhooks; the pod webhook is always
	// PodPinFailurePolicy with PodPinTimeoutSeconds.
	FailurePolicy  admissionregistrationv1.FailurePolicyType
	TimeoutSeconds int32
	// InProcessInjection leaves out the DaemonSet mutating webhook: the API server injects with
	// the MutatingAdmissionPolicy internal/inprocess generates instead.
	InProcessInjection bool
}

// The pod webhook fails open with a short timeout, whatever the DaemonSet webhooks do: it sits
// in the path of every DaemonSet pod, and the DaemonSet controller writes the node pin into its
// pods itself, so a daemonguard that is down or slow must never keep a node agent (CNI, storage,
// log shipper) from starting. Fail-closed webhooks on pods deadlock the very agents that would
// bring a cluster back.
const (
	PodPinFailurePolicy        = admissionregistrationv1.Ignore
	PodPinTimeoutSeconds int32 = 2
)

func (o ConfigurationOptions) clientConfig(path string) admissionregistrationv1.WebhookClientConfig {
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: o.CABundle}
	if o.URL != "" {
		cc.URL = ptr.To(o.URL + path)
		return cc
	}
	svc := *o.Service
	svc.Path = ptr.To(path)
	cc.Service = &svc
	return cc
}

func (o ConfigurationOptions) namespaceSelector() *metav1.LabelSelector {
	exempt := admission.ExemptNamespaces(o.Namespace, o.ExemptNamespaces)
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: exempt,
	}}}
}

// injectNamespaceSelector is namespaceSelector narrowed to the namespaces marked for node agents
// (admission.InjectionScope): the DaemonSet mutating webhook and the in-process injection
// policy's binding.
func (o ConfigurationOptions) injectNamespaceSelector() *metav1.LabelSelector {
	sel := o.namespaceSelector()
	sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: admission.NodeAgentsLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{"true"},
	})
	return sel
}

// injectObjectSelector skips DaemonSets labelled daemonguard.io/ignore=true before they reach the
// mutating webhook (admission.InjectionScope). The validating webhook has no object selector: a
// label on the object itself never exempts it from validation.
func injectObjectSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: admission.IgnoreLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{"true"},
	}}}
}

func (o ConfigurationOptions) defaults() ConfigurationOptions {
	if o.FailurePolicy == "" {
		o.FailurePolicy = admissionregistrationv1.Fail
	}
	if o.TimeoutSeconds == 0 {
		o.TimeoutSeconds = 5
	}
	return o
}

// rolloutStatusOnly keeps the rollout controller's progress reports
// (admission.StatusOnlyUpdateCEL) away from the DaemonSet webhooks, whatever their failurePolicy.
var rolloutStatusOnly = admissionregistrationv1.MatchCondition{
	Name:       "not-rollout-status-only",
	Expression: "!(" + admission.StatusOnlyUpdateCEL + ")",
}

var daemonSetRule = admissionregistrationv1.RuleWithOperations{
	Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
	Rule: admissionregistrationv1.Rule{
		APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"daemonsets"},
		Scope: ptr.To(admissionregistrationv1.NamespacedScope),
	},
}

// Configurations returns the mutating and validating webhook configurations. sideEffects None
// lets server-side dry-run (kubectl diff --server-side, Argo CD's server-side diff) see exactly
// what a real write would store. reinvocationPolicy IfNeeded re-runs the DaemonSet mutation if
// another webhook changes the object after us.
func Configurations(o ConfigurationOptions) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	o = o.defaults()
	none := admissionregistrationv1.SideEffectClassNone
	versions := []string{"v1"}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{
				Name:                    admission.MutateDaemonSetWebhook,
				ClientConfig:            o.clientConfig(MutateDaemonSetPath),
				Rules:                   []admissionregistrationv1.RuleWithOperations{daemonSetRule},
				FailurePolicy:           ptr.To(o.FailurePolicy),
				SideEffects:             &none,
				TimeoutSeconds:          ptr.To(o.TimeoutSeconds),
				AdmissionReviewVersions: versions,
				NamespaceSelector:       o.injectNamespaceSelector(),
				ObjectSelector:          injectObjectSelector(),
				MatchConditions:         []admissionregistrationv1.MatchCondition{rolloutStatusOnly},
				ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			},
			{
				Name:         "pods.mutate.daemonguard.io",
				ClientConfig: o.clientConfig(MutatePodPath),
				Rules: []admissionregistrationv1.RuleWithOperations{{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule: admissionregistrationv1.Rule{
						APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
						Scope: ptr.To(admissionregistrationv1.NamespacedScope),
					},
				}},
				FailurePolicy:           ptr.To(PodPinFailurePolicy),
				SideEffects:             &none,
				TimeoutSeconds:          ptr.To(PodPinTimeoutSeconds),
				AdmissionReviewVersions: versions,
				NamespaceSelector:       o.namespaceSelector(),
				// Only pods controlled by a DaemonSet are of interest; the CEL condition keeps every
				// other pod in the cluster from paying a webhook round trip.
				MatchConditions: []admissionregistrationv1.MatchCondition{{
					Name:       "owned-by-daemonset",
					Expression: `has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, r.kind == "DaemonSet" && has(r.controller) && r.controller)`,
				}},
			},
		},
	}
	if o.InProcessInjection {
		mutating.Webhooks = mutating.Webhooks[1:]
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    admission.ValidateDaemonSetWebhook,
			ClientConfig:            o.clientConfig(ValidateDaemonSetPath),
			Rules:                   []admissionregistrationv1.RuleWithOperations{daemonSetRule},
			FailurePolicy:           ptr.To(o.FailurePolicy),
			SideEffects:             &none,
			TimeoutSeconds:          ptr.To(o.TimeoutSeconds),
			AdmissionReviewVersions: versions,
			NamespaceSelector:       o.namespaceSelector(),
			MatchConditions:         []admissionregistrationv1.MatchCondition{rolloutStatusOnly},
		}},
	}
	return mutating, validating
}
