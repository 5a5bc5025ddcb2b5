package rolloutcli

import (
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// dsFixture builds a DaemonSet at generation 2 whose status the options then shape.
type dsOption func(*appsv1.DaemonSet)

func fixture(opts ...dsOption) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "mon", Generation: 2, Annotations: map[string]string{}},
		Spec:       appsv1.DaemonSetSpec{UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 4, CurrentNumberScheduled: 4,
			UpdatedNumberScheduled: 4, NumberAvailable: 4, NumberReady: 4},
	}
	for _, o := range opts {
		o(ds)
	}
	return ds
}

func managed(ds *appsv1.DaemonSet) {
	ds.Annotations[rolloutapi.AnnotationRollout] = rolloutapi.RolloutManaged
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	ds.Annotations[rolloutapi.StatusRevision] = "abc"
}

func onDelete(ds *appsv1.DaemonSet) {
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
}

func counts(updated, available, desired int32) dsOption {
	return func(ds *appsv1.DaemonSet) {
		ds.Status.UpdatedNumberScheduled, ds.Status.NumberAvailable, ds.Status.DesiredNumberScheduled = updated, available, desired
	}
}

func unobserved(ds *appsv1.DaemonSet) { ds.Status.ObservedGeneration = 1 }

func annotate(kv ...string) dsOption {
	return func(ds *appsv1.DaemonSet) {
		for i := 0; i+1 < len(kv); i += 2 {
			ds.Annotations[kv[i]] = kv[i+1]
		}
	}
}

// cond makes the condition of type t the one True rollout condition, as the controller does.
func cond(t appsv1.DaemonSetConditionType, reason, message string) dsOption {
	return func(ds *appsv1.DaemonSet) {
		for _, ct := range []appsv1.DaemonSetConditionType{rolloutapi.ConditionProgressing, rolloutapi.ConditionPaused, rolloutapi.ConditionFailed, rolloutapi.ConditionComplete} {
			c := appsv1.DaemonSetCondition{Type: ct, Status: corev1.ConditionFalse}
			if ct == t {
				c.Status, c.Reason, c.Message = corev1.ConditionTrue, reason, message
			}
			ds.Status.Conditions = append(ds.Status.Conditions, c)
		}
	}
}

func TestEvaluate(t *testing.T) {
	progressing := []dsOption{managed, counts(4, 4, 20), cond(rolloutapi.ConditionProgressing, "RolloutProgressing", "step 3/5 (25%): 9 of 20 nodes updated, 1 unavailable of budget 2; next: worker-3, worker-4"),
		annotate(rolloutapi.StatusStep, "3/5: 25%", rolloutapi.StatusUpdated, "9/20",
			rolloutapi.StatusNextNodes, "worker-3,worker-4 (workers before control-plane nodes, then by name)")}
	tests := map[string]struct {
		ds       *appsv1.DaemonSet
		revision string       // current controller-revision-hash
		want     StatusReport // compared on the fields set below
		msg      []string     // in the message
		notMsg   []string     // not in the message
	}{
		"unmanaged RollingUpdate, all updated and available: done like kubectl": {
			ds:   fixture(),
			want: StatusReport{Phase: rolloutapi.PhaseComplete, Done: true, Updated: 4, Available: 4, Desired: 4},
			msg:  []string{`daemon set "agent" successfully rolled out`},
		},
		"unmanaged RollingUpdate, generation not observed: waiting": {
			ds:   fixture(unobserved),
			want: StatusReport{Phase: rolloutapi.PhaseWaiting, Updated: 4, Available: 4, Desired: 4},
			msg:  []string{"Waiting for daemon set spec update to be observed..."},
		},
		"unmanaged RollingUpdate, pods not yet updated: kubectl's message": {
			ds:   fixture(counts(1, 4, 4)),
			want: StatusReport{Phase: rolloutapi.PhaseProgressing, Updated: 1, Available: 4, Desired: 4},
			msg:  []string{`Waiting for daemon set "agent" rollout to finish: 1 out of 4 new pods have been updated...`},
		},
		"unmanaged RollingUpdate, updated but not available: kubectl's message": {
			ds:   fixture(counts(4, 3, 4)),
			want: StatusReport{Phase: rolloutapi.PhaseProgressing, Updated: 4, Available: 3, Desired: 4},
			msg:  []string{`3 of 4 updated pods are available...`},
		},
		"unmanaged RollingUpdate on no node at all: done": {
			ds:   fixture(counts(0, 0, 0)),
			want: StatusReport{Phase: rolloutapi.PhaseComplete, Done: true},
		},
		"unmanaged OnDelete: nothing rolls it out, done with advice": {
			ds:   fixture(onDelete, counts(1, 4, 4)),
			want: StatusReport{Phase: rolloutapi.PhaseNotRolling, Done: true, Updated: 1, Available: 4, Desired: 4},
			msg:  []string{"nothing rolls its pods out", "1 of 4 pods run the current template", `daemonguard.io/rollout: "managed"`},
		},
		"managed annotation on RollingUpdate: the built-in controller rolls, with a warning": {
			ds:   fixture(annotate(rolloutapi.AnnotationRollout, rolloutapi.RolloutManaged), counts(2, 4, 4)),
			want: StatusReport{Phase: rolloutapi.PhaseProgressing, Updated: 2, Available: 4, Desired: 4},
			msg:  []string{"2 out of 4 new pods"},
		},
		"managed, progressing: the message is the condition's, the counts for the progress line the status annotations'": {
			ds:   fixture(progressing...),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 9, Desired: 20, ControllerCounts: true, Step: "3/5", StepSpec: "25%", Next: "worker-3, worker-4", NextReason: "workers before control-plane nodes, then by name"},
			msg:  []string{`Waiting for daemon set "agent" rollout to finish: step 3/5 (25%): 9 of 20 nodes updated, 1 unavailable of budget 2; next: worker-3, worker-4...`},
		},
		"managed, baking: the condition's message with the time left, and until when on the progress line": {
			ds: fixture(managed, counts(20, 20, 20), annotate(rolloutapi.AnnotationBake, "5m", rolloutapi.StatusStep, "1/1: done", rolloutapi.StatusUpdated, "20/20",
				rolloutapi.StatusCompletedAt, "2026-11-29T02:30:00Z"),
				cond(rolloutapi.ConditionProgressing, rolloutapi.ReasonBaking, "20 of 20 nodes run revision abc; baking 3m0s more (daemonguard.io/bake 5m0s since 2026-11-29T02:30:00Z)")),
			revision: "abc",
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 20, Desired: 20, ControllerCounts: true, Step: "1/1", StepSpec: "done",
				Reported: "baking until 2026-11-29T02:35:00Z"},
			msg:    []string{`Waiting for daemon set "agent" rollout to finish: 20 of 20 nodes run revision abc; baking 3m0s more`},
			notMsg: []string{"successfully"},
		},
		"managed, baking with the completion time not written yet: baking, no end": {
			ds: fixture(managed, annotate(rolloutapi.AnnotationBake, "5m", rolloutapi.StatusStep, "1/1: done", rolloutapi.StatusUpdated, "4/4"),
				cond(rolloutapi.ConditionProgressing, rolloutapi.ReasonBaking, "4 of 4 nodes run revision abc; baking 5m0s more")),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 4, Desired: 4, ControllerCounts: true, Step: "1/1", StepSpec: "done", Reported: "baking"},
		},
		"managed, progressing condition without a message: the reason, no counts": {
			ds:     fixture(managed, cond(rolloutapi.ConditionProgressing, "RolloutProgressing", "")),
			want:   StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 4, Available: 4, Desired: 4},
			msg:    []string{`rollout to finish (RolloutProgressing)...`},
			notMsg: []string{"of 4"},
		},
		"managed, complete and every pod updated and available: done": {
			ds:       fixture(managed, counts(4, 4, 4), cond(rolloutapi.ConditionComplete, "RolloutComplete", "4 of 4 nodes run revision abc"), annotate(rolloutapi.StatusStep, "1/1: done")),
			revision: "abc",
			want:     StatusReport{Managed: true, Phase: rolloutapi.PhaseComplete, Done: true, Updated: 4, Available: 4, Desired: 4},
			msg:      []string{`successfully rolled out (4 of 4 nodes run revision abc)`},
		},
		"managed, complete but a new node's pod is not available yet: waiting, with the DaemonSet's counts alone": {
			ds:     fixture(managed, counts(5, 4, 5), cond(rolloutapi.ConditionComplete, "RolloutComplete", "4 of 4 nodes run revision abc"), annotate(rolloutapi.StatusUpdated, "4/4")),
			want:   StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 5, Available: 4, Desired: 5},
			msg:    []string{"5 out of 5 new pods have been updated, 4 available..."},
			notMsg: []string{"4 of 4"},
		},
		"managed, complete but generation not observed: waiting for the spec": {
			ds:   fixture(managed, unobserved, cond(rolloutapi.ConditionComplete, "RolloutComplete", "")),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseWaiting, Updated: 4, Available: 4, Desired: 4},
			msg:  []string{"spec update to be observed"},
		},
		"managed, failed: exit with the condition's reason and message, which name the step": {
			ds: fixture(managed, counts(1, 4, 4), cond(rolloutapi.ConditionFailed, "PodFailure", "step 1/2 (1): new pods fail; new pods not available on 1 of 4 nodes: worker-0: ImagePullBackOff"),
				annotate(rolloutapi.StatusStep, "2/2: 100%", rolloutapi.StatusFailedRevision, "abc", rolloutapi.StatusUpdated, "0/4")),
			want:   StatusReport{Managed: true, Phase: rolloutapi.PhaseFailed, Failed: true, Updated: 0, Desired: 4, ControllerCounts: true, Reported: "failed", Step: "2/2", StepSpec: "100%"},
			msg:    []string{`rollout of daemon set "agent" failed: PodFailure: step 1/2 (1): new pods fail; new pods not available on 1 of 4 nodes: worker-0: ImagePullBackOff`},
			notMsg: []string{"2/2", "0 of 4"},
		},
		"managed, failed on an older revision than the current template: waiting for the controller": {
			ds:       fixture(managed, cond(rolloutapi.ConditionFailed, "PodFailure", "new pods fail")),
			revision: "def",
			want:     StatusReport{Managed: true, Phase: rolloutapi.PhaseWaiting, Updated: 4, Available: 4, Desired: 4},
			msg:      []string{"start rolling out revision def", "still reports on revision abc"},
		},
		"managed, revision reported as the ControllerRevision name: same revision": {
			ds:       fixture(managed, annotate(rolloutapi.StatusRevision, "agent-def", rolloutapi.StatusFailedRevision, "def"), cond(rolloutapi.ConditionFailed, "PodFailure", "new pods fail")),
			revision: "def",
			want:     StatusReport{Managed: true, Phase: rolloutapi.PhaseFailed, Failed: true, Updated: 4, Available: 4, Desired: 4},
		},
		"managed, failed with the current revision known and matching: failed": {
			ds:       fixture(managed, annotate(rolloutapi.StatusFailedRevision, "abc"), cond(rolloutapi.ConditionFailed, "ProgressDeadlineExceeded", "step 1/1: 100% made no progress for 10m0s")),
			revision: "abc",
			want:     StatusReport{Managed: true, Phase: rolloutapi.PhaseFailed, Failed: true, Updated: 4, Available: 4, Desired: 4, Reported: "failed"},
			msg:      []string{"failed: ProgressDeadlineExceeded: step 1/1: 100% made no progress"},
		},
		"managed, annotations already name the new revision but Failed is the old one's: waiting": {
			ds:       fixture(managed, annotate(rolloutapi.StatusRevision, "def", rolloutapi.StatusFailedRevision, "abc"), cond(rolloutapi.ConditionFailed, "PodFailure", "new pods fail")),
			revision: "def",
			want:     StatusReport{Managed: true, Phase: rolloutapi.PhaseWaiting, Updated: 4, Available: 4, Desired: 4},
			msg:      []string{"its Failed condition is about abc"},
		},
		"managed, same without the current revision known: waiting": {
			ds:   fixture(managed, annotate(rolloutapi.StatusRevision, "def", rolloutapi.StatusFailedRevision, "abc"), cond(rolloutapi.ConditionFailed, "PodFailure", "new pods fail")),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseWaiting, Updated: 4, Available: 4, Desired: 4},
			msg:  []string{"its Failed condition is about abc"},
		},
		"managed, Failed with failed-revision cleared (complete being reported): waiting": {
			ds:   fixture(managed, cond(rolloutapi.ConditionFailed, "PodFailure", "new pods fail")),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseWaiting, Updated: 4, Available: 4, Desired: 4},
			msg:  []string{"its Failed condition is about an earlier revision"},
		},
		"managed, invalid settings: failed whatever the revision": {
			ds:       fixture(managed, unobserved, cond(rolloutapi.ConditionFailed, "InvalidSettings", `daemonguard.io/steps: bad`)),
			revision: "def",
			want:     StatusReport{Managed: true, Phase: rolloutapi.PhaseFailed, Failed: true, Updated: 4, Available: 4, Desired: 4},
			msg:      []string{"InvalidSettings: daemonguard.io/steps: bad"},
		},
		"managed, paused by annotation: the condition's message, with its resume command": {
			ds: fixture(managed, counts(2, 4, 4), annotate(rolloutapi.AnnotationPaused, "true", rolloutapi.StatusStep, "2/3: 50%", rolloutapi.StatusUpdated, "2/4"),
				cond(rolloutapi.ConditionPaused, "PausedByAnnotation", "step 2/3 (50%): paused by daemonguard.io/paused=true; 2 of 4 nodes updated; resume with: daemonguard rollout resume ds/agent -n mon")),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhasePaused, Paused: true, Updated: 2, Desired: 4, ControllerCounts: true, Reported: "paused", Step: "2/3", StepSpec: "50%"},
			msg:  []string{`rollout of daemon set "agent" is paused: PausedByAnnotation: step 2/3 (50%): paused by daemonguard.io/paused=true; 2 of 4 nodes updated; resume with: daemonguard rollout resume ds/agent -n mon`},
		},
		"managed, a timed pause whose next step the annotations already show: the step of the condition alone": {
			ds: fixture(managed, annotate(rolloutapi.StatusStep, "3/3: 100%", rolloutapi.StatusUpdated, "1/5"),
				cond(rolloutapi.ConditionPaused, "TimedPause", "step 2/3 (pause:5m): waiting 4m0s more; 1 of 5 nodes updated")),
			want:   StatusReport{Managed: true, Phase: rolloutapi.PhasePaused, Paused: true, Updated: 1, Desired: 5, ControllerCounts: true, Step: "3/3", StepSpec: "100%"},
			msg:    []string{`rollout of daemon set "agent" is paused: TimedPause: step 2/3 (pause:5m): waiting 4m0s more; 1 of 5 nodes updated`},
			notMsg: []string{"3/3", "resume"},
		},
		"managed, malformed status annotations: left out, with a warning": {
			ds: fixture(managed, annotate(rolloutapi.StatusUpdated, "9 of 20", rolloutapi.StatusStep, "3/5: 25%"),
				cond(rolloutapi.ConditionProgressing, "RolloutProgressing", "")),
			want:   StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 4, Available: 4, Desired: 4, Step: "3/5", StepSpec: "25%"},
			msg:    []string{"rollout to finish (RolloutProgressing)..."},
			notMsg: []string{"9"},
		},
		"managed with analysis gates: each gate's last measurement, in gate order": {
			ds: fixture(managed, cond(rolloutapi.ConditionProgressing, "AnalysisRunning", "step 1/1 (100%): analysing 1 node (w1)"),
				annotate(rolloutapi.StatusAnalysis, `{"wave":1,"gates":[{"name":"errors","passed":1,"next":"2026-11-26T21:01:00Z","last":{"at":"2026-11-26T21:00:30+00:00","result":"Passed","message":"1 nodes within bounds (max 0.1)"}},{"name":"latency"}]}`)),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseProgressing, Updated: 4, Available: 4, Desired: 4,
				Measurements: []string{"gate errors: Passed at 2026-11-26T21:00:30Z: 1 nodes within bounds (max 0.1)"}},
			msg: []string{"analysing 1 node (w1)"},
		},
		"managed, paused by an inconclusive gate: paused, naming the nodes without data, the run and the next measurement": {
			ds: fixture(managed, annotate(rolloutapi.StatusAnalysis, `{"wave":2,"gates":[{"name":"errors","inconclusive":3,"next":"2026-11-26T21:04:30Z","last":{"at":"2026-11-26T21:02:30Z","result":"Inconclusive","message":"no sample labelled node for 1 of 2 nodes: w2"}}]}`),
				cond(rolloutapi.ConditionPaused, rolloutapi.ReasonAnalysisInconclusive, "step 1/1 (100%): the analysis of 2 nodes is inconclusive: gate errors: no sample labelled node for 1 of 2 nodes: w2; nothing is replaced until it has data; measuring again at 2026-11-26T21:04:30Z")),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhasePaused, Paused: true, Updated: 4, Available: 4, Desired: 4,
				Measurements: []string{"gate errors: Inconclusive at 2026-11-26T21:02:30Z: no sample labelled node for 1 of 2 nodes: w2 (inconclusive 3 in a row; measuring again at 2026-11-26T21:04:30Z)"}},
			msg: []string{`rollout of daemon set "agent" is paused: AnalysisInconclusive: `, "no sample labelled node for 1 of 2 nodes: w2"},
		},
		"managed, no condition yet: waiting for the controller": {
			ds:   fixture(managed, annotate(rolloutapi.StatusRevision, "")),
			want: StatusReport{Managed: true, Phase: rolloutapi.PhaseWaiting, Updated: 4, Available: 4, Desired: 4},
			msg:  []string{"no rollout condition yet; if this persists, check that the controller is running"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := Evaluate(tc.ds, tc.revision)
			msg, warning := got.Message, got.Warning
			got.Message, got.Warning, got.Name = "", "", ""
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Evaluate =\n %+v\nwant\n %+v", got, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(msg, m) {
					t.Errorf("message %q lacks %q", msg, m)
				}
			}
			for _, m := range tc.notMsg {
				if strings.Contains(msg, m) {
					t.Errorf("message %q has %q", msg, m)
				}
			}
			if wantWarning := strings.Contains(name, "warning"); (warning != "") != wantWarning {
				t.Errorf("warning = %q, want one: %v", warning, wantWarning)
			}
		})
	}
}
