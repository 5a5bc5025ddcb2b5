package rolloutapi

import (
	"bytes"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// NewestRevision is the ControllerRevision of revs that ds controls (owner reference with its
// UID) with the highest .revision, the name breaking ties; nil when ds controls none of them.
func NewestRevision(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision) *appsv1.ControllerRevision {
	var newest *appsv1.ControllerRevision
	for _, cr := range revs {
		if !metav1.IsControlledBy(cr, ds) {
			continue
		}
		if newest == nil || cr.Revision > newest.Revision || cr.Revision == newest.Revision && cr.Name > newest.Name {
			newest = cr
		}
	}
	return newest
}

// CurrentRevisionHash is the controller-revision-hash of ds's current template, or "" while the
// DaemonSet controller has not observed ds's generation or ds controls no revision in revs. Once
// it has observed it, the newest ControllerRevision is the current template's: the DaemonSet
// controller creates or renumbers it before it updates status.observedGeneration.
func CurrentRevisionHash(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision) string {
	if ds.Status.ObservedGeneration < ds.Generation {
		return ""
	}
	newest := NewestRevision(ds, revs)
	if newest == nil {
		return ""
	}
	return newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
}

// ApplyRevision returns a copy of ds with the revision's data (a strategic merge patch replacing
// spec.template) applied, as kubectl does to show and restore a DaemonSet revision.
func ApplyRevision(ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision) (*appsv1.DaemonSet, error) {
	original, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	patched, err := strategicpatch.StrategicMergePatch(original, rev.Data.Raw, &appsv1.DaemonSet{})
	if err != nil {
		return nil, fmt.Errorf("apply revision %d (%s): %w", rev.Revision, rev.Name, err)
	}
	out := &appsv1.DaemonSet{}
	if err := json.Unmarshal(patched, out); err != nil {
		return nil, fmt.Errorf("apply revision %d (%s): %w", rev.Revision, rev.Name, err)
	}
	return out, nil
}

// RestorePatch is the strategic merge patch that puts rev's template back on its DaemonSet, as
// `kubectl rollout undo` sends it: the revision's data, which replaces spec.template. With a
// resourceVersion the patch carries it as a precondition, so that the API server refuses it with
// a conflict when the DaemonSet changed since it was read; "" patches whatever is stored.
func RestorePatch(rev *appsv1.ControllerRevision, resourceVersion string) ([]byte, error) {
	if len(rev.Data.Raw) == 0 {
		return nil, fmt.Errorf("revision %d (%s) records no template", rev.Revision, rev.Name)
	}
	if resourceVersion == "" {
		return rev.Data.Raw, nil
	}
	var patch map[string]any
	if err := json.Unmarshal(rev.Data.Raw, &patch); err != nil {
		return nil, fmt.Errorf("revision %d (%s): its data is not a JSON patch: %w", rev.Revision, rev.Name, err)
	}
	patch["metadata"] = map[string]any{"resourceVersion": resourceVersion}
	return json.Marshal(patch)
}

// TemplatePatch is the ControllerRevision data the DaemonSet controller records for ds:
// {"spec":{"template":{...,"$patch":"replace"}}}.
func TemplatePatch(ds *appsv1.DaemonSet) ([]byte, error) {
	raw, err := json.Marshal(ds)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, err
	}
	spec, _ := obj["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	if template == nil {
		template = map[string]any{}
	}
	template["$patch"] = "replace"
	return json.Marshal(map[string]any{"spec": map[string]any{"template": template}})
}

// RevisionMatches tells whether the revision records ds's current template: byte-equal data as the
// DaemonSet controller compares, or a semantically equal template once applied.
func RevisionMatches(ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision) (bool, error) {
	if p, err := TemplatePatch(ds); err == nil && bytes.Equal(p, rev.Data.Raw) {
		return true, nil
	}
	applied, err := ApplyRevision(ds, rev)
	if err != nil {
		return false, err
	}
	return apiequality.Semantic.DeepEqual(applied.Spec.Template, ds.Spec.Template), nil
}

// RevisionTemplate is the pod template a revision records.
func RevisionTemplate(ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	applied, err := ApplyRevision(ds, rev)
	if err != nil {
		return nil, err
	}
	return &applied.Spec.Template, nil
}

// RevisionWithHash is the ControllerRevision of revs that ds controls whose
// controller-revision-hash is hash; nil when there is none (the revision history limit may have
// pruned it).
func RevisionWithHash(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision, hash string) *appsv1.ControllerRevision {
	for _, cr := range revs {
		if metav1.IsControlledBy(cr, ds) && cr.Labels[appsv1.DefaultDaemonSetUniqueLabelKey] == hash {
			return cr
		}
	}
	return nil
}
