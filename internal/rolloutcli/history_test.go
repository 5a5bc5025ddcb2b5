package rolloutcli

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

func TestUndoTarget(t *testing.T) {
	tests := map[string]struct {
		revisions           []int64
		current, toRevision int64
		want                int64
		wantErr             string
	}{
		"the revision before the current one":                            {revisions: []int64{1, 2, 3}, current: 3, want: 2},
		"after an undo, the previous number is the template before it":   {revisions: []int64{2, 3}, current: 3, want: 2},
		"gaps in the numbers are skipped":                                {revisions: []int64{1, 4, 9}, current: 9, want: 4},
		"a current revision that is not the newest: the one before it":   {revisions: []int64{1, 2, 3}, current: 2, want: 1},
		"the oldest as current: the newest other one":                    {revisions: []int64{1, 2, 3}, current: 1, want: 3},
		"current not recorded yet: the newest, in force before":          {revisions: []int64{1, 2}, current: 0, want: 2},
		"a single revision, current: nothing to roll back to":            {revisions: []int64{1}, current: 1, wantErr: "no last revision"},
		"no revision at all: nothing to roll back to":                    {revisions: nil, wantErr: "no last revision"},
		"an explicit revision that exists":                               {revisions: []int64{1, 2, 3}, current: 3, toRevision: 1, want: 1},
		"an explicit revision equal to current is returned (skip later)": {revisions: []int64{1, 2}, current: 2, toRevision: 2, want: 2},
		"an explicit revision that does not exist":                       {revisions: []int64{1, 2}, current: 2, toRevision: 7, wantErr: "unable to find specified revision 7"},
		"a negative revision":                                            {revisions: []int64{1, 2}, current: 2, toRevision: -1, wantErr: "unable to find specified revision -1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := UndoTarget(tc.revisions, tc.current, tc.toRevision)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("UndoTarget = %d, %v; want error %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("UndoTarget = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

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

// revisionOf records ds's template as the DaemonSet controller does.
func revisionOf(t *testing.T, ds *appsv1.DaemonSet, n int64) *appsv1.ControllerRevision {
	t.Helper()
	data, err := rolloutapi.TemplatePatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: "agent-" + string(rune('a'+n))}, Revision: n, Data: runtime.RawExtension{Raw: data}}
}

func TestRevisionsRoundTrip(t *testing.T) {
	v1, v2 := dsWithImage("agent:1"), dsWithImage("agent:2")
	r1, r2 := revisionOf(t, v1, 1), revisionOf(t, v2, 2)

	if !bytes.Contains(r1.Data.Raw, []byte(`"$patch":"replace"`)) || !bytes.HasPrefix(r1.Data.Raw, []byte(`{"spec":{"template":`)) {
		t.Errorf("TemplatePatch = %s, want {\"spec\":{\"template\":{...,\"$patch\":\"replace\"}}}", r1.Data.Raw)
	}
	// Restoring revision 1 onto the current DaemonSet gives back its template, replacing (not
	// merging) the containers, and leaves the rest of the DaemonSet alone.
	restored, err := rolloutapi.ApplyRevision(v2, r1)
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
			if got, err := rolloutapi.RevisionMatches(tc.ds, tc.rev); err != nil || got != tc.match {
				t.Errorf("RevisionMatches = %v, %v; want %v", got, err, tc.match)
			}
		})
	}

	current, err := CurrentRevision(v2, []*appsv1.ControllerRevision{r1, r2})
	if err != nil || current != 2 {
		t.Errorf("CurrentRevision = %d, %v; want 2 (the matching one)", current, err)
	}
	v3 := dsWithImage("agent:3")
	if current, _ := CurrentRevision(v3, []*appsv1.ControllerRevision{r1, r2}); current != 2 {
		t.Errorf("CurrentRevision of an unrecorded but observed template = %d, want the newest (2)", current)
	}
	v3.Generation = 4
	if current, _ := CurrentRevision(v3, []*appsv1.ControllerRevision{r1, r2}); current != 0 {
		t.Errorf("CurrentRevision of an unobserved new template = %d, want 0 (unknown)", current)
	}
}

func TestPrintHistory(t *testing.T) {
	r1 := &appsv1.ControllerRevision{Revision: 1}
	r2 := &appsv1.ControllerRevision{Revision: 12, ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ChangeCauseAnnotation: "kubectl set image ds/agent agent=agent:2"}}}
	var out bytes.Buffer
	if err := PrintHistory(&out, []*appsv1.ControllerRevision{r1, r2}); err != nil {
		t.Fatal(err)
	}
	want := "REVISION  CHANGE-CAUSE\n1         <none>\n12        kubectl set image ds/agent agent=agent:2\n"
	if out.String() != want {
		t.Errorf("PrintHistory:\n%s\nwant:\n%s", out.String(), want)
	}
	out.Reset()
	_ = PrintHistory(&out, nil)
	if out.String() != "No rollout history found.\n" {
		t.Errorf("PrintHistory of nothing = %q", out.String())
	}
	revs := []*appsv1.ControllerRevision{{Revision: 3}, {Revision: 1}, {Revision: 2}}
	SortRevisions(revs)
	if revs[0].Revision != 1 || revs[2].Revision != 3 {
		t.Errorf("SortRevisions = %d,%d,%d", revs[0].Revision, revs[1].Revision, revs[2].Revision)
	}
}
