package rolloutapi

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestCurrentRevisionHash(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "ds-uid", Generation: 2}, Status: appsv1.DaemonSetStatus{ObservedGeneration: 2}}
	rev := func(name string, n int64, owner types.UID) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: name + "-hash"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: owner, Controller: ptr.To(true)}}},
			Revision: n,
		}
	}
	unobserved := ds.DeepCopy()
	unobserved.Status.ObservedGeneration = 1
	tests := map[string]struct {
		ds   *appsv1.DaemonSet
		revs []*appsv1.ControllerRevision
		want string
	}{
		"the highest revision, in any order":      {ds: ds, revs: []*appsv1.ControllerRevision{rev("b", 3, "ds-uid"), rev("c", 1, "ds-uid"), rev("a", 2, "ds-uid")}, want: "b-hash"},
		"revisions of another owner are not ds's": {ds: ds, revs: []*appsv1.ControllerRevision{rev("other", 9, "other-uid"), rev("a", 1, "ds-uid")}, want: "a-hash"},
		"a tie goes to the greater name":          {ds: ds, revs: []*appsv1.ControllerRevision{rev("b", 2, "ds-uid"), rev("a", 2, "ds-uid")}, want: "b-hash"},
		"no revision of ds":                       {ds: ds, revs: []*appsv1.ControllerRevision{rev("other", 9, "other-uid")}},
		"generation not observed: unknown":        {ds: unobserved, revs: []*appsv1.ControllerRevision{rev("a", 1, "ds-uid")}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := CurrentRevisionHash(tc.ds, tc.revs); got != tc.want {
				t.Errorf("CurrentRevisionHash = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestIsManaged(t *testing.T) {
	tests := map[string]struct {
		annotation string
		strategy   appsv1.DaemonSetUpdateStrategyType
		want       bool
	}{
		"annotated and OnDelete":                        {annotation: RolloutManaged, strategy: appsv1.OnDeleteDaemonSetStrategyType, want: true},
		"annotated but RollingUpdate":                   {annotation: RolloutManaged, strategy: appsv1.RollingUpdateDaemonSetStrategyType},
		"OnDelete without the annotation":               {strategy: appsv1.OnDeleteDaemonSetStrategyType},
		"OnDelete with another value of the annotation": {annotation: "yes", strategy: appsv1.OnDeleteDaemonSetStrategyType},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: tc.strategy}}}
			if tc.annotation != "" {
				ds.Annotations = map[string]string{AnnotationRollout: tc.annotation}
			}
			if got := IsManaged(ds); got != tc.want {
				t.Errorf("IsManaged = %v, want %v", got, tc.want)
			}
		})
	}
}

// dsWithImage is a DaemonSet of one container running image.
func dsWithImage(image string) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "mon", Generation: 3, UID: "u1"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: image}}},
			},
		},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 3},
	}
}

// revisionOf records ds's template as the DaemonSet controller does, as revision n of ds.
func revisionOf(t *testing.T, ds *appsv1.DaemonSet, n int64) *appsv1.ControllerRevision {
	t.Helper()
	data, err := TemplatePatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	name := "agent-" + string(rune('a'+n))
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: name + "-hash"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}},
		Revision: n, Data: runtime.RawExtension{Raw: data},
	}
}

func TestRevisionsRoundTrip(t *testing.T) {
	v1, v2 := dsWithImage("agent:1"), dsWithImage("agent:2")
	r1, r2 := revisionOf(t, v1, 1), revisionOf(t, v2, 2)

	if !bytes.Contains(r1.Data.Raw, []byte(`"$patch":"replace"`)) || !bytes.HasPrefix(r1.Data.Raw, []byte(`{"spec":{"template":`)) {
		t.Errorf("TemplatePatch = %s, want {\"spec\":{\"template\":{...,\"$patch\":\"replace\"}}}", r1.Data.Raw)
	}
	// Restoring revision 1 onto the current DaemonSet gives back its template, replacing (not
	// merging) the containers, and leaves the rest of the DaemonSet alone.
	restored, err := ApplyRevision(v2, r1)
	if err != nil {
		t.Fatal(err)
	}
	if got := restored.Spec.Template.Spec.Containers; len(got) != 1 || got[0].Image != "agent:1" {
		t.Errorf("restored containers = %+v, want agent:1 only", got)
	}
	if restored.Name != "agent" || restored.Spec.Selector == nil {
		t.Errorf("ApplyRevision lost the rest of the DaemonSet: %+v", restored.ObjectMeta)
	}
	for name, tc := range map[string]struct {
		ds    *appsv1.DaemonSet
		rev   *appsv1.ControllerRevision
		match bool
	}{
		"a revision matches the template it recorded":     {v2, r2, true},
		"a revision does not match another template":      {v2, r1, false},
		"semantically equal data matches (key order etc)": {v1, &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"$patch":"replace","spec":{"containers":[{"image":"agent:1","name":"agent","resources":{}}]},"metadata":{"labels":{"app":"agent"}}}}}`)}}, true},
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := RevisionMatches(tc.ds, tc.rev); err != nil || got != tc.match {
				t.Errorf("RevisionMatches = %v, %v; want %v", got, err, tc.match)
			}
		})
	}
}

func TestRevisionWithHash(t *testing.T) {
	v1, v2 := dsWithImage("agent:1"), dsWithImage("agent:2")
	r1, r2 := revisionOf(t, v1, 1), revisionOf(t, v2, 2)
	foreign := r1.DeepCopy()
	foreign.OwnerReferences[0].UID = "another"
	revs := []*appsv1.ControllerRevision{foreign, r1, r2}
	if got := RevisionWithHash(v2, revs, "agent-b-hash"); got != r1 {
		t.Errorf("RevisionWithHash(agent-b-hash) = %v, want revision 1 of the DaemonSet, not another owner's", got)
	}
	if got := RevisionWithHash(v2, revs, "pruned"); got != nil {
		t.Errorf("RevisionWithHash of a hash no revision has = %v, want nil", got)
	}
}
