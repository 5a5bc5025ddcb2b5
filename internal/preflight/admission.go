package preflight

// This file is admission as the cluster would run it on a manifest: merged into the live
// DaemonSet as kubectl apply does (applyMerge), then daemonguard's admission core called where the
// API server would call its webhooks, by their selectors (admit).

import (
	"context"
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// AdmissionReport is what admission would do to the write.
type AdmissionReport struct {
	// Injection is "webhook", "in-process" (a MutatingAdmissionPolicy generated from the
	// policies), "not called" (the webhook's selectors exclude the object) or "none" (daemonguard is
	// not installed).
	Injection string `json:"injection"`
	// Validation is "webhook", "not called" or "none".
	Validation string             `json:"validation"`
	Skip       string             `json:"skip,omitempty"` // why admission leaves the write alone
	Mutated    bool               `json:"mutated"`
	Allowed    bool               `json:"allowed"`
	Violations []policy.Violation `json:"violations"`
	// Diff is a unified diff of the live object (or the manifest, on create) against the object
	// as it would be stored; empty when they are the same.
	Diff string `json:"diff,omitempty"`
	// Policies says which policy set judged the object: the built-ins, with the policy
	// ConfigMaps of daemonguard's namespace when it is known.
	Policies string `json:"policies,omitempty"`
}

// lastAppliedAnnotation is kubectl's record of the last client-side apply, the "original" of its
// three-way merge.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// applyMerge is what kubectl apply stores: the three-way strategic merge of the last applied
// configuration, the manifest and the live object. A field removed from the manifest is removed
// only when the last apply set it; with server-side apply (no annotation) removals are not seen.
func applyMerge(live *appsv1.DaemonSet, current, manifest []byte) ([]byte, error) {
	meta, err := strategicpatch.NewPatchMetaFromStruct(appsv1.DaemonSet{})
	if err != nil {
		return nil, err
	}
	original := []byte(live.Annotations[lastAppliedAnnotation])
	patch, err := strategicpatch.CreateThreeWayMergePatch(original, manifest, current, meta, true)
	if err != nil {
		return nil, fmt.Errorf("merge the manifest into the live DaemonSet: %w", err)
	}
	merged, err := strategicpatch.StrategicMergePatchUsingLookupPatchMeta(current, patch, meta)
	if err != nil {
		return nil, fmt.Errorf("merge the manifest into the live DaemonSet: %w", err)
	}
	return merged, nil
}

// admit runs daemonguard's admission on the review as the API server would call it, and returns
// the object as it would be stored.
func (v *clusterView) admit(ctx context.Context, rep *AdmissionReport, rv admission.Review, nsLabels map[string]string) ([]byte, error) {
	obj, err := objectLabels(rv.Object)
	if err != nil {
		return nil, err
	}
	old, _ := objectLabels(rv.OldObject)
	// The API server calls a webhook when its namespace selector matches and its object
	// selector matches the object, or on an update the old object.
	calls := func(nsSel, objSel *metav1.LabelSelector) bool {
		return selects(nsSel, nsLabels) && (selects(objSel, obj) || (rv.OldObject != nil && selects(objSel, old)))
	}
	mutate := v.mutating != nil && calls(v.mutating.NamespaceSelector, v.mutating.ObjectSelector)
	validate := v.validating != nil && calls(v.validating.NamespaceSelector, v.validating.ObjectSelector)
	switch {
	case v.mutating != nil && mutate:
		rep.Injection = "webhook"
	case v.mutating != nil:
		rep.Injection = "not called"
	case v.validating != nil && validate:
		// Installed without the DaemonSet mutating webhook: a MutatingAdmissionPolicy generated
		// from the same policies injects (daemonguard policy export), within the same selectors.
		rep.Injection, mutate = "in-process", true
	case v.validating != nil:
		rep.Injection = "not called"
	}
	switch {
	case v.validating != nil && validate:
		rep.Validation = "webhook"
	case v.validating != nil:
		rep.Validation = "not called"
	}
	if !mutate && !validate {
		return rv.Object, nil
	}
	a := admission.Reviewer{Lookups: admission.Lookups{
		NamespaceLabels: func(context.Context, string) (map[string]string, error) { return nsLabels, nil },
		Nodes:           func(context.Context) ([]*corev1.Node, error) { return v.nodes, nil },
		PriorityClass:   admission.PriorityClassValues(v.priorityClasses),
	}}
	r := a.Simulate(ctx, v.policies, rv)
	switch {
	case r.Malformed != nil:
		return nil, r.Malformed
	case r.Failed != nil:
		return nil, fmt.Errorf("policy evaluation: %w", r.Failed)
	case r.Skip != "":
		rep.Skip = r.Skip
		return rv.Object, nil
	}
	stored := rv.Object
	if mutate {
		stored, rep.Mutated = r.Mutated, len(r.Patch) > 0
	}
	if validate {
		rep.Allowed = r.Verdict.Allowed
		if r.Violations != nil {
			rep.Violations = r.Violations
		}
	}
	return stored, nil
}

// selects is the API server's label selector match for a webhook's namespace or object selector:
// nil or empty selects everything.
func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(set))
}

func objectLabels(raw []byte) (map[string]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var head struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	return head.Metadata.Labels, nil
}

// withNamespace sets metadata.namespace, as the API server does for a manifest without one.
func withNamespace(raw []byte, ns string) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["namespace"] = ns
	return json.Marshal(obj)
}
