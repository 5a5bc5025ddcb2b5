package rollout

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

const newRev = "new"

// workers is one reachable worker per pod, w00, w01, ..., each running the pod given as
// "revision state", the state one of ready, notready and failing.
func workers(pods ...string) []rolloutplan.NodeState {
	out := make([]rolloutplan.NodeState, len(pods))
	for i, p := range pods {
		rev, state, _ := strings.Cut(p, " ")
		name := fmt.Sprintf("w%02d", i)
		ps := rolloutplan.PodState{Name: name + "-" + rev, UID: "uid-" + name, Revision: rev}
		switch state {
		case "ready":
			ps.Ready, ps.ReadySince = true, t0.Add(-time.Hour)
		case "failing":
			ps.Failure = "ImagePullBackOff"
		}
		out[i] = rolloutplan.NodeState{Name: name, Reachable: true, Pods: []rolloutplan.PodState{ps}}
	}
	return out
}

// shown is what a DaemonSet shows after the writes of a decision for in: its status annotations
// and conditions.
func shown(t *testing.T, in rolloutplan.RolloutState) (map[string]string, []appsv1.DaemonSetCondition) {
	t.Helper()
	d := decide(factsOf(in, nil, nil))
	annotations := map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged}
	for k, v := range d.Annotations {
		if v != nil {
			annotations[k] = *v
		}
	}
	return annotations, d.Conditions
}

func TestDecide(t *testing.T) {
	running := rolloutapi.Status{Revision: newRev, StepStarted: t0.Add(-time.Minute), Progress: t0.Add(-time.Minute)}
	oneAtATime, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationMaxUnavailable: "1", rolloutapi.AnnotationSteps: ""})
	if err != nil {
		t.Fatal(err)
	}
	// progressing replaces the first of four nodes; moved is one node further, in the same step.
	progressing := rolloutplan.RolloutState{TargetRevision: newRev, Nodes: workers("old ready", "old ready", "old ready", "old ready"), Settings: oneAtATime, Status: running, Now: t0}
	moved := progressing
	moved.Nodes = workers("new ready", "old ready", "old ready", "old ready")
	complete := progressing
	complete.Nodes = workers("new ready", "new ready")
	failing := progressing
	failing.Nodes = workers("new failing", "old ready", "old ready", "old ready")
	slowPods := progressing
	slowPods.MinReadySeconds = 30

	// baking has every node updated under a bake of 5m; bakingShown is what its first report
	// shows, but for the completion time, which a lagging cache does not show yet.
	baking := complete
	baking.Settings.Bake = 5 * time.Minute
	bakingShown, bakingConditions := shown(t, baking)
	delete(bakingShown, rolloutapi.StatusCompletedAt)

	shownAnnotations, shownConditions := shown(t, progressing)
	invalid := errors.New(`daemonguard.io/steps: the last step that is not a pause must be 100%, got "50%"`)
	invalidShown := rolloutConditions(shownConditions, rolloutapi.PhaseFailed, rolloutapi.ReasonInvalidSettings, InvalidSettingsMessage(invalid), t0.Add(-time.Hour))

	tests := map[string]struct {
		facts Facts
		// The decision, compared on:
		wantDelete      []string      // nodes whose pods are deleted
		wantAnnotations bool          // some status annotation is written
		wantCondition   string        // "<type>/<reason>" of the True condition written; "" writes none
		wantEvent       string        // Event reason; "" records none
		wantFailure     string        // reason counted as a failure
		wantReported    bool          // the report counts as written now
		wantRequeue     time.Duration // when to look again without an event
	}{
		"settings that do not parse: Failed with InvalidSettings, and nothing else": {
			facts:         Facts{Observed: rolloutplan.Observed{Now: t0, DaemonSet: showing(shownAnnotations, shownConditions)}, SettingsErr: invalid},
			wantCondition: "Failed/InvalidSettings",
		},
		"invalid settings already reported: nothing to write": {
			facts: Facts{Observed: rolloutplan.Observed{Now: t0, DaemonSet: showing(shownAnnotations, invalidShown)}, SettingsErr: invalid},
		},
		"the current template's revision not known yet: look again soon": {
			facts:       Facts{Observed: rolloutplan.Observed{Now: t0, DaemonSet: showing(shownAnnotations, shownConditions)}},
			wantRequeue: revisionPending,
		},
		"the first report: written at once, with an Event": {
			facts:      factsOf(progressing, map[string]string{}, nil),
			wantDelete: []string{"w00"}, wantAnnotations: true, wantCondition: "Progressing/RolloutProgressing", wantEvent: "RolloutProgressing",
			wantReported: true, wantRequeue: 9 * time.Minute, // the progress deadline, 10m from a minute ago
		},
		"only counts moved, within reportInterval of the last report: pods deleted, the report deferred": {
			facts:      reportedAt(factsOf(moved, shownAnnotations, shownConditions), t0.Add(-reportInterval/2)),
			wantDelete: []string{"w01"}, wantRequeue: reportInterval,
		},
		"only counts moved, the last report reportInterval ago: written, without an Event": {
			facts:      reportedAt(factsOf(moved, shownAnnotations, shownConditions), t0.Add(-reportInterval)),
			wantDelete: []string{"w01"}, wantAnnotations: true, wantCondition: "Progressing/RolloutProgressing",
			wantReported: true, wantRequeue: 10 * time.Minute, // progress made: the deadline runs from now
		},
		"the report already shown and due: nothing to write": {
			facts:        factsOf(progressing, shownAnnotations, shownConditions),
			wantDelete:   []string{"w00"},
			wantReported: true, wantRequeue: 9 * time.Minute,
		},
		"a new phase right after a report: written at once, with an Event": {
			facts:           reportedAt(factsOf(complete, shownAnnotations, shownConditions), t0),
			wantAnnotations: true, wantCondition: "Complete/RolloutComplete", wantEvent: "RolloutComplete", wantReported: true,
		},
		"a bake begins right after a report: Progressing/Baking written at once, with an Event, back at the bake's end": {
			facts:           reportedAt(factsOf(baking, shownAnnotations, shownConditions), t0),
			wantAnnotations: true, wantCondition: "Progressing/Baking", wantEvent: "RolloutProgressing", wantReported: true,
			wantRequeue: 5 * time.Minute,
		},
		"a bake shown without its completion time, right after a report: the time written at once, no Event": {
			facts:           reportedAt(factsOf(baking, bakingShown, bakingConditions), t0),
			wantAnnotations: true, wantReported: true, wantRequeue: 5 * time.Minute,
		},
		"a failing new pod: a Failed condition and a warning Event counted as a failure": {
			facts:           reportedAt(factsOf(failing, shownAnnotations, shownConditions), t0),
			wantAnnotations: true, wantCondition: "Failed/PodFailure", wantEvent: "RolloutFailed", wantFailure: "PodFailure", wantReported: true,
		},
		"progressing with MinReadySeconds: look again when a new pod may have become available": {
			facts:      factsOf(slowPods, shownAnnotations, shownConditions),
			wantDelete: []string{"w00"}, wantReported: true, wantRequeue: 30 * time.Second,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := decide(tc.facts)
			var deleted []string
			if d.Plan != nil {
				for _, ref := range d.Plan.Delete {
					deleted = append(deleted, ref.Node)
				}
			}
			if !slices.Equal(deleted, tc.wantDelete) {
				t.Errorf("deleted on %v, want %v", deleted, tc.wantDelete)
			}
			if (len(d.Annotations) > 0) != tc.wantAnnotations {
				t.Errorf("annotation changes %v, want some: %v", d.Annotations, tc.wantAnnotations)
			}
			if got := trueCondition(d.Conditions); got != tc.wantCondition {
				t.Errorf("condition written %q, want %q", got, tc.wantCondition)
			}
			event, failure := "", ""
			if d.Event != nil {
				event, failure = d.Event.Reason, d.Event.FailureReason
			}
			if event != tc.wantEvent || failure != tc.wantFailure {
				t.Errorf("Event %q counting failure %q, want %q counting %q", event, failure, tc.wantEvent, tc.wantFailure)
			}
			if d.Event != nil && (d.Plan == nil || *d.Event != d.Plan.Event || !strings.HasSuffix(d.Event.Note, trueMessage(d.Conditions))) {
				t.Errorf("Event %+v is not the plan's, saying what the condition says (%q)", *d.Event, trueMessage(d.Conditions))
			}
			if tc.facts.SettingsErr != nil && d.Conditions != nil && trueMessage(d.Conditions) != InvalidSettingsMessage(tc.facts.SettingsErr) {
				t.Errorf("invalid settings reported as %q, without what to do", trueMessage(d.Conditions))
			}
			if d.Reported != tc.wantReported {
				t.Errorf("reported %v, want %v", d.Reported, tc.wantReported)
			}
			if d.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", d.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

// A malformed completion time is never fatal: the rollout bakes again in full from now, and the
// report that writes the time anew says so in a warning Event naming the value; well-formed
// status annotations record no such Event.
func TestDecideRewritesMalformedStatusWithAWarning(t *testing.T) {
	in := rolloutplan.RolloutState{TargetRevision: newRev, Nodes: workers("new ready", "new ready"), Now: t0,
		Settings: rolloutapi.Settings{Steps: []rolloutapi.Step{{Kind: rolloutapi.StepPercent, Value: 100, Text: "100%"}}, Bake: 5 * time.Minute}}
	annotations, conditions := shown(t, in)
	annotations[rolloutapi.StatusCompletedAt] = "yesterday"
	status, err := rolloutapi.DecodeStatus(annotations)
	if err == nil {
		t.Fatal("a malformed completion time decodes without an error")
	}
	in.Status = status
	f := factsOf(in, annotations, conditions)
	f.StatusErr = err
	d := decide(f)
	if d.Plan == nil || d.Plan.Reason != rolloutapi.ReasonBaking || d.RequeueAfter != 5*time.Minute {
		t.Fatalf("plan %+v, requeue %v; want Baking for the full 5m", d.Plan, d.RequeueAfter)
	}
	if got := d.Annotations[rolloutapi.StatusCompletedAt]; got == nil || *got != "2026-11-23T10:00:00Z" {
		t.Errorf("completion time written as %v, want now", got)
	}
	if d.Rewritten == nil || d.Rewritten.Type != corev1.EventTypeWarning || d.Rewritten.Reason != reasonStatusRewritten ||
		!strings.Contains(d.Rewritten.Note, rolloutapi.StatusCompletedAt+` "yesterday"`) {
		t.Errorf("warning Event %+v, want %s naming %s \"yesterday\"", d.Rewritten, reasonStatusRewritten, rolloutapi.StatusCompletedAt)
	}

	f.StatusErr = nil
	if d := decide(f); d.Rewritten != nil {
		t.Errorf("an Event %+v without malformed status annotations", d.Rewritten)
	}
}

// trueMessage is the message of the True rollout condition of conds; "" for none.
func trueMessage(conds []appsv1.DaemonSetCondition) string {
	if c := rolloutplan.ActiveCondition(conds); c != nil {
		return c.Message
	}
	return ""
}

// trueCondition is "<type>/<reason>" of the True rollout condition of conds; "" for none.
func trueCondition(conds []appsv1.DaemonSetCondition) string {
	if c := rolloutplan.ActiveCondition(conds); c != nil {
		return string(c.Type) + "/" + c.Reason
	}
	return ""
}

func TestRolloutConditions(t *testing.T) {
	before := t0.Add(-time.Hour)
	other := appsv1.DaemonSetCondition{Type: "Healthy", Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(before)}
	progressing := rolloutConditions([]appsv1.DaemonSetCondition{other}, rolloutapi.PhaseProgressing, "RolloutProgressing", "1 of 4", before)
	tests := map[string]struct {
		conds             []appsv1.DaemonSetCondition
		phase             rolloutapi.Phase
		reason, message   string
		want              string // the True rollout condition; "" when nothing changes
		wantTransitionNow []appsv1.DaemonSetConditionType
	}{
		"the first report adds every rollout condition and keeps another owner's": {
			conds: []appsv1.DaemonSetCondition{other}, phase: rolloutapi.PhaseProgressing, reason: "RolloutProgressing", message: "1 of 4",
			want:              "Progressing/RolloutProgressing",
			wantTransitionNow: []appsv1.DaemonSetConditionType{"Complete", "Failed", "Paused", "Progressing"},
		},
		"the same report again changes nothing": {
			conds: progressing, phase: rolloutapi.PhaseProgressing, reason: "RolloutProgressing", message: "1 of 4",
		},
		"a new message keeps the transition time": {
			conds: progressing, phase: rolloutapi.PhaseProgressing, reason: "RolloutProgressing", message: "2 of 4",
			want: "Progressing/RolloutProgressing",
		},
		"a new phase moves the transition time of the two conditions that flip": {
			conds: progressing, phase: rolloutapi.PhaseComplete, reason: "RolloutComplete", message: "4 of 4",
			want:              "Complete/RolloutComplete",
			wantTransitionNow: []appsv1.DaemonSetConditionType{"Complete", "Progressing"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := rolloutConditions(tc.conds, tc.phase, tc.reason, tc.message, t0)
			if tc.want == "" {
				if got != nil {
					t.Fatalf("conditions %+v, want no change", got)
				}
				return
			}
			if c := trueCondition(got); c != tc.want {
				t.Errorf("True condition %q, want %q", c, tc.want)
			}
			if !slices.ContainsFunc(got, func(c appsv1.DaemonSetCondition) bool { return c.Type == other.Type && c.Status == other.Status }) {
				t.Errorf("another owner's condition lost: %+v", got)
			}
			var now []appsv1.DaemonSetConditionType
			for _, c := range got {
				if c.LastTransitionTime.Time.Equal(t0) {
					now = append(now, c.Type)
				}
			}
			if !slices.Equal(now, tc.wantTransitionNow) {
				t.Errorf("transitioned now: %v, want %v", now, tc.wantTransitionNow)
			}
			if len(tc.conds) > 0 && &got[0] == &tc.conds[0] {
				t.Errorf("the input conditions were modified in place")
			}
		})
	}
}

// showing is a managed DaemonSet that shows annotations and conditions as its last report.
func showing(annotations map[string]string, conds []appsv1.DaemonSetCondition) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "mon", Annotations: annotations},
		Status:     appsv1.DaemonSetStatus{Conditions: conds},
	}
}

// reportedAt is f with the last report at.
func reportedAt(f Facts, at time.Time) Facts {
	f.LastReport = at
	return f
}

// factsOf is what gather reads of a cluster in which in holds: the DaemonSet showing annotations
// and conditions, and its nodes and pods as the API server holds them, so that rolloutplan.StateOf
// has them to classify.
func factsOf(in rolloutplan.RolloutState, annotations map[string]string, conds []appsv1.DaemonSetCondition) Facts {
	ds := showing(annotations, conds)
	ds.Name, ds.Namespace, ds.Spec.MinReadySeconds = in.Name, in.Namespace, in.MinReadySeconds
	f := Facts{Observed: rolloutplan.Observed{Now: in.Now, DaemonSet: ds, Settings: in.Settings, Status: in.Status, TargetRevision: in.TargetRevision,
		Measurements: in.Measurements}}
	for _, n := range in.Nodes {
		ready := corev1.ConditionTrue
		if !n.Reachable {
			ready = corev1.ConditionFalse
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}}}
		if n.ControlPlane {
			node.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		if in.Settings.TopologyKey != "" {
			node.Labels[in.Settings.TopologyKey] = n.Domain
		}
		f.Nodes = append(f.Nodes, node)
		for _, p := range n.Pods {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: p.Name, UID: types.UID(p.UID), Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: p.Revision}},
				Spec:       corev1.PodSpec{NodeName: n.Name},
			}
			if p.Terminating {
				pod.DeletionTimestamp = &metav1.Time{Time: p.DeletedAt}
			}
			switch {
			case p.Ready:
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(p.ReadySince)}}
			case !p.NotReadySince.IsZero():
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(p.NotReadySince)}}
			}
			if p.Failure != "" {
				pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: p.Failure}}}}
			}
			f.Pods = append(f.Pods, pod)
		}
	}
	return f
}

func TestInvalidSettingsMessageSaysWhatToDo(t *testing.T) {
	_, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationProgressDeadline: "soon"})
	if err == nil {
		t.Fatal("a progress deadline of \"soon\" parsed")
	}
	want := `daemonguard.io/progress-deadline "soon": must be a positive Go duration; no pods are replaced until the annotation is fixed: correct it in the manifest and apply it`
	if got := InvalidSettingsMessage(err); got != want {
		t.Errorf("message\n %q\nwant\n %q", got, want)
	}
}
