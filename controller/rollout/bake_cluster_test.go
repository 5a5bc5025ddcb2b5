package rollout_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// A managed DaemonSet with daemonguard.io/bake: 5s shows Progressing/Baking once every pod runs
// the new revision, and Complete only after the bake, by the clock of its own status: the
// Complete condition's transition is at least 5s after status.daemonguard.io/completed-at, and
// a few seconds at most (the controller comes back at the bake's end; nothing else would wake
// it). The controller is restarted during the bake: the bake runs on from the written time.
func TestBakeHoldsCompleteUntilTheBakeHasPassed(t *testing.T) {
	localcluster.NeedCluster(t)
	const bake = 5 * time.Second
	ctl := startController(t)
	defer func() { ctl.Stop() }()
	ns := cluster.NewTestNamespace(t)
	deployManaged(t, ns, nodeCount, map[string]string{rolloutapi.AnnotationMaxUnavailable: "5", rolloutapi.AnnotationBake: bake.String()})

	setImage(t, ns, "nginx:1.24.0")
	ds := clustertest.WaitDaemonSet(t, cluster, ns, "nginx-ds", time.Minute, "nginx-ds baking the new revision", func(ds *appsv1.DaemonSet) (bool, string) {
		c := clustertest.RolloutCondition(ds, rolloutapi.PhaseProgressing)
		return c != nil && c.Reason == rolloutapi.ReasonBaking && ds.Annotations[rolloutapi.StatusRevision] != "" &&
			strings.Contains(c.Message, ds.Annotations[rolloutapi.StatusRevision]), fmt.Sprintf("conditions %+v annotations %v", ds.Status.Conditions, ds.Annotations)
	})
	revision := ds.Annotations[rolloutapi.StatusRevision]
	status, err := rolloutapi.DecodeStatus(ds.Annotations)
	if err != nil {
		t.Fatalf("status annotations: %v", err)
	}
	baking := clustertest.RolloutCondition(ds, rolloutapi.PhaseProgressing)
	switch {
	case clustertest.RolloutCondition(ds, rolloutapi.PhaseComplete) != nil:
		t.Errorf("Complete while baking: %s", fmt.Sprintf("conditions %+v annotations %v", ds.Status.Conditions, ds.Annotations))
	case status.Counts == nil || status.Counts.Updated != nodeCount || status.Counts.Desired != nodeCount:
		t.Errorf("baking with %s = %q, want every node updated", rolloutapi.StatusUpdated, ds.Annotations[rolloutapi.StatusUpdated])
	case status.CompletedAt.IsZero() || status.CompletedAt.Before(status.Progress):
		t.Errorf("%s = %q, want a time at or after the last node was updated (%s = %q)", rolloutapi.StatusCompletedAt,
			ds.Annotations[rolloutapi.StatusCompletedAt], rolloutapi.StatusProgress, ds.Annotations[rolloutapi.StatusProgress])
	case !strings.Contains(baking.Message, "; baking ") || !strings.Contains(baking.Message, rolloutapi.AnnotationBake+" 5s since "):
		t.Errorf("Baking message %q, want the time left and the bake", baking.Message)
	}
	waitEvent(t, ns, "a RolloutProgressing event for the bake", func(e eventsv1.Event) bool {
		return e.Reason == rolloutapi.EventProgressing && strings.Contains(e.Note, "nodes run revision "+revision+"; baking ")
	})

	// A new process, from the annotations alone.
	if err := ctl.Stop(); err != nil {
		t.Fatalf("controller stopped with %v", err)
	}
	ctl = startController(t)

	ds = waitPhase(t, ns, rolloutapi.PhaseComplete, time.Minute)
	complete := clustertest.RolloutCondition(ds, rolloutapi.PhaseComplete)
	completedAt := ds.Annotations[rolloutapi.StatusCompletedAt]
	if completedAt != status.CompletedAt.Format(time.RFC3339) {
		t.Errorf("%s = %q after the restart, want %q unchanged", rolloutapi.StatusCompletedAt, completedAt, status.CompletedAt.Format(time.RFC3339))
	}
	// Both times are to the second; the controller's requeue lands within a reconcile of the end.
	const slack = 10 * time.Second
	if held := complete.LastTransitionTime.Sub(status.CompletedAt); held < bake || held > bake+slack {
		t.Errorf("Complete at %s, %v after %s %s; want from %v to %v", complete.LastTransitionTime.UTC().Format(time.RFC3339), held,
			rolloutapi.StatusCompletedAt, completedAt, bake, bake+slack)
	}
	if ds.Annotations[rolloutapi.StatusRevision] != revision || !strings.Contains(complete.Message, "baked 5s since "+completedAt) {
		t.Errorf("Complete on revision %s: %q, want revision %s baked since %s", ds.Annotations[rolloutapi.StatusRevision], complete.Message, revision, completedAt)
	}
	t.Logf("baked %v: Complete at %s, completed at %s", bake, complete.LastTransitionTime.UTC().Format(time.RFC3339), completedAt)
}
