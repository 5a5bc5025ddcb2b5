package rolloutapi

import (
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
