package rolloutapi

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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

func TestRevisionWithHash(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", UID: "ds-uid"}}
	rev := func(hash string, owner types.UID) *appsv1.ControllerRevision {
		return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + hash, Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: owner, Controller: ptr.To(true)}}}}
	}
	r1 := rev("b", "ds-uid")
	revs := []*appsv1.ControllerRevision{rev("b", "another"), r1, rev("c", "ds-uid")}
	if got := RevisionWithHash(ds, revs, "b"); got != r1 {
		t.Errorf("RevisionWithHash(b) = %v, want revision 1 of the DaemonSet, not another owner's", got)
	}
	if got := RevisionWithHash(ds, revs, "pruned"); got != nil {
		t.Errorf("RevisionWithHash of a hash no revision has = %v, want nil", got)
	}
}

// RestorePatch puts back what the revision recorded, with the DaemonSet's resourceVersion as a
// precondition when given, and refuses a revision whose data is no patch.
func TestRestorePatch(t *testing.T) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns", ResourceVersion: "41"}}
	ds.Spec.Template.Spec.Containers = []corev1.Container{{Name: "agent", Image: "agent:v1"}}
	recorded, err := TemplatePatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	rev := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-1"}, Revision: 1, Data: runtime.RawExtension{Raw: recorded}}

	unlocked, err := RestorePatch(rev, "")
	if err != nil || string(unlocked) != string(recorded) {
		t.Errorf("RestorePatch without a resourceVersion = %s, %v; want the revision's data", unlocked, err)
	}
	locked, err := RestorePatch(rev, "42")
	if err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(locked, &patch); err != nil || patch.Metadata.ResourceVersion != "42" {
		t.Errorf("RestorePatch with resourceVersion 42 = %s (%v); want it as the precondition", locked, err)
	}
	// Applied to a DaemonSet that changed image since, the patch brings the revision's back.
	ds.Spec.Template.Spec.Containers[0].Image = "agent:v2"
	restored, err := ApplyRevision(ds, &appsv1.ControllerRevision{Data: runtime.RawExtension{Raw: locked}})
	if err != nil || restored.Spec.Template.Spec.Containers[0].Image != "agent:v1" {
		t.Errorf("the locked patch applied: %v, %v; want image agent:v1", restored, err)
	}

	for name, data := range map[string][]byte{"no data": nil, "not JSON": []byte("spec: {}")} {
		bad := &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-2"}, Revision: 2, Data: runtime.RawExtension{Raw: data}}
		if _, err := RestorePatch(bad, "42"); err == nil || !strings.Contains(err.Error(), "revision 2 (agent-2)") {
			t.Errorf("%s: RestorePatch error %v, want one naming revision 2 (agent-2)", name, err)
		}
	}
}
