package rollout

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

const oldRev = "old"

// gatedAnnotations are one-at-a-time settings with one gate, "errors", measured once a second
// and passing after count measurements, that rolls back on failure when rollback is true.
func gatedAnnotations(count string, rollback bool) map[string]string {
	annotations := map[string]string{
		rolloutapi.AnnotationMaxUnavailable: "1", rolloutapi.AnnotationSteps: "",
		rolloutapi.AnnotationAnalysis: `- {name: errors, query: 'errors{node=~"{{ nodes }}"}', max: 0.1, interval: 1s, count: ` + count + `}`,
	}
	if rollback {
		annotations[rolloutapi.AnnotationOnAnalysisFailure] = rolloutapi.OnAnalysisFailureRollback
	}
	return annotations
}

// gatedSettings are gatedAnnotations parsed.
func gatedSettings(t *testing.T, count string, rollback bool) rolloutapi.Settings {
	t.Helper()
	s, err := rolloutapi.ParseSettings(gatedAnnotations(count, rollback))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// analysing is a rollout whose first node, w00, runs the new revision and whose gate "errors" is
// due: the wave of w00 waits to be measured.
func analysing(settings rolloutapi.Settings) rolloutplan.RolloutState {
	return rolloutplan.RolloutState{
		Name: "agent", Namespace: "mon", TargetRevision: newRev, Nodes: workers("new ready", "old ready", "old ready", "old ready"), Settings: settings,
		Status: rolloutapi.Status{Revision: newRev, StepStarted: t0.Add(-time.Minute), Progress: t0.Add(-time.Minute),
			Analysis: &rolloutapi.AnalysisStatus{Wave: 1, Gates: []rolloutapi.GateStatus{{Name: "errors", Next: t0.Add(-time.Second)}}}},
		Now: t0,
	}
}

// errorsOf is the gate "errors" measuring value on w00.
func errorsOf(value float64) []rolloutanalysis.Measurement {
	return []rolloutanalysis.Measurement{{Gate: "errors", Values: map[string]float64{"w00": value}}}
}

// revision is a ControllerRevision of the DaemonSet of uid: revision n with hash, recording
// image.
func revision(t *testing.T, uid types.UID, hash string, n int64, image string) *appsv1.ControllerRevision {
	t.Helper()
	ds := managedAgent(uid, image)
	data, err := rolloutapi.TemplatePatch(ds)
	if err != nil {
		t.Fatal(err)
	}
	return &appsv1.ControllerRevision{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mon", Name: "agent-" + hash, Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: uid, Controller: ptr.To(true)}}},
		Revision: n, Data: runtime.RawExtension{Raw: data},
	}
}

// managedAgent is the managed DaemonSet mon/agent running image.
func managedAgent(uid types.UID, image string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "agent"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "mon", Name: "agent", UID: uid, Generation: 2, Annotations: map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged}},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: image}}}},
		},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2},
	}
}

func TestDecideAnalysis(t *testing.T) {
	withRevisions := func(f Facts, revs ...*appsv1.ControllerRevision) Facts {
		f.Revisions = revs
		return f
	}
	measured := func(in rolloutplan.RolloutState, ms []rolloutanalysis.Measurement) rolloutplan.RolloutState {
		in.Measurements = ms
		return in
	}
	old := revision(t, "", oldRev, 1, "agent:1")
	tests := map[string]struct {
		facts        Facts
		wantRollback *Rollback
		wantMeasured []GateResult
		wantReason   string // of the True condition written
	}{
		"a failed analysis that opts in to roll back: the decision names the revision to put back": {
			facts:        withRevisions(factsOf(measured(analysing(gatedSettings(t, "1", true)), errorsOf(0.5)), nil, nil), old),
			wantRollback: &Rollback{Hash: oldRev, Name: "agent-old", Number: 1, Failed: newRev},
			wantMeasured: []GateResult{{"errors", rolloutapi.MeasurementFailed}}, wantReason: rolloutapi.ReasonAnalysisFailed,
		},
		"a failed analysis whose old revision was pruned: halted, nothing to put back": {
			facts:        factsOf(measured(analysing(gatedSettings(t, "1", true)), errorsOf(0.5)), nil, nil),
			wantMeasured: []GateResult{{"errors", rolloutapi.MeasurementFailed}}, wantReason: rolloutapi.ReasonAnalysisFailed,
		},
		"a failed analysis without the opt-in: halted, nothing put back": {
			facts:        withRevisions(factsOf(measured(analysing(gatedSettings(t, "1", false)), errorsOf(0.5)), nil, nil), old),
			wantMeasured: []GateResult{{"errors", rolloutapi.MeasurementFailed}}, wantReason: rolloutapi.ReasonAnalysisFailed,
		},
		"no answer from Prometheus: inconclusive, nothing put back": {
			facts:        withRevisions(factsOf(measured(analysing(gatedSettings(t, "1", true)), []rolloutanalysis.Measurement{{Gate: "errors", Err: "no Prometheus"}}), nil, nil), old),
			wantMeasured: []GateResult{{"errors", rolloutapi.MeasurementInconclusive}}, wantReason: rolloutapi.ReasonAnalysisInconclusive,
		},
		"a passing measurement right after a report: the report is written at once": {
			facts:        reportedAt(withRevisions(factsOf(measured(analysing(gatedSettings(t, "3", true)), errorsOf(0)), nil, nil), old), t0),
			wantMeasured: []GateResult{{"errors", rolloutapi.MeasurementPassed}}, wantReason: rolloutapi.ReasonAnalysisRunning,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := decide(tc.facts)
			if (d.Rollback == nil) != (tc.wantRollback == nil) || (d.Rollback != nil && *d.Rollback != *tc.wantRollback) {
				t.Errorf("rollback %+v, want %+v", d.Rollback, tc.wantRollback)
			}
			if d.Plan == nil || d.Plan.RollbackTo != ptrValue(tc.wantRollback).Hash {
				t.Errorf("the plan rolls back to %q, the decision %+v", d.Plan.RollbackTo, d.Rollback)
			}
			if !slices.Equal(d.Measured, tc.wantMeasured) {
				t.Errorf("measured %+v, want %+v", d.Measured, tc.wantMeasured)
			}
			if !d.Reported || len(d.Annotations) == 0 {
				t.Errorf("a reconcile that measured deferred its report (reported %v, annotations %v)", d.Reported, d.Annotations)
			}
			if got := trueCondition(d.Conditions); !strings.HasSuffix(got, "/"+tc.wantReason) {
				t.Errorf("condition %q, want reason %s", got, tc.wantReason)
			}
		})
	}
}

func ptrValue(rb *Rollback) Rollback {
	if rb == nil {
		return Rollback{}
	}
	return *rb
}

// fakeAnalyzer answers every request with its measurements and records the requests and their
// scopes.
type fakeAnalyzer struct {
	answer   []rolloutanalysis.Measurement
	requests []rolloutanalysis.Request
	scopes   []rolloutanalysis.Scope
}

func (a *fakeAnalyzer) Scope(namespace string, marked bool) rolloutanalysis.Scope {
	return (&promquery.Client{}).Scope(namespace, marked)
}

func (a *fakeAnalyzer) Measure(_ context.Context, req rolloutanalysis.Request, scope rolloutanalysis.Scope) []rolloutanalysis.Measurement {
	a.requests = append(a.requests, req)
	a.scopes = append(a.scopes, scope)
	return a.answer
}

// fixedStore is a Store of fixed pods and nodes.
type fixedStore struct {
	pods  []*corev1.Pod
	nodes []*corev1.Node
}

func (s fixedStore) PodsOf(context.Context, string, types.UID) ([]*corev1.Pod, error) {
	return s.pods, nil
}
func (s fixedStore) Nodes(context.Context) ([]*corev1.Node, error) { return s.nodes, nil }

// gatedReconciler is a Reconciler of a fake cluster that holds in as the managed DaemonSet
// mon/agent (settings gatedAnnotations("1", true)), revision "old" running agent:1 and "new"
// agent:2, and whose Analyzer answers answer.
func gatedReconciler(t *testing.T, in rolloutplan.RolloutState, answer []rolloutanalysis.Measurement) (*Reconciler, client.Client, *fakeAnalyzer, *events.FakeRecorder) {
	t.Helper()
	const uid = "ds-uid"
	ds := managedAgent(uid, "agent:2")
	for k, v := range gatedAnnotations("1", true) {
		ds.Annotations[k] = v
	}
	for k, v := range rolloutapi.StatusChanges(nil, in.Status) {
		ds.Annotations[k] = *v
	}
	seen := factsOf(in, nil, nil)
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithStatusSubresource(&appsv1.DaemonSet{}).
		WithObjects(ds, revision(t, uid, oldRev, 1, "agent:1"), revision(t, uid, newRev, 2, "agent:2")).Build()
	analyzer := &fakeAnalyzer{answer: answer}
	recorder := events.NewFakeRecorder(10)
	r := &Reconciler{Client: c, Store: fixedStore{pods: seen.Pods, nodes: seen.Nodes}, Recorder: recorder,
		Clock: clocktesting.NewFakePassiveClock(t0), Analyzer: analyzer}
	return r, c, analyzer, recorder
}

var agentKey = types.NamespacedName{Namespace: "mon", Name: "agent"}

// reconcileAgent reconciles mon/agent once and returns it as the cluster then holds it.
func reconcileAgent(t *testing.T, r *Reconciler, c client.Client) appsv1.DaemonSet {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: agentKey}); err != nil {
		t.Fatal(err)
	}
	var got appsv1.DaemonSet
	if err := c.Get(context.Background(), agentKey, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// A reconcile of a wave whose gate fails measures it with the Analyzer, puts the old template
// back, says so in a warning Event, and records the failed revision.
func TestReconcileRollsBackAFailedAnalysis(t *testing.T) {
	r, c, analyzer, recorder := gatedReconciler(t, analysing(gatedSettings(t, "1", true)), errorsOf(0.5))
	got := reconcileAgent(t, r, c)
	if len(analyzer.requests) != 1 || len(analyzer.requests[0].Queries) != 1 || analyzer.requests[0].Queries[0].Wave != `errors{node=~"w00"}` {
		t.Fatalf("requests %+v, want one of the wave w00", analyzer.requests)
	}
	if image := got.Spec.Template.Spec.Containers[0].Image; image != "agent:1" {
		t.Errorf("template runs %s after the rollback, want agent:1", image)
	}
	if got.Annotations[rolloutapi.StatusFailedRevision] != newRev {
		t.Errorf("failed revision %q recorded, want %q", got.Annotations[rolloutapi.StatusFailedRevision], newRev)
	}
	if c := rolloutplan.ActiveCondition(got.Status.Conditions); c == nil || c.Reason != rolloutapi.ReasonAnalysisFailed {
		t.Errorf("condition %+v, want Failed/%s", c, rolloutapi.ReasonAnalysisFailed)
	}
	close(recorder.Events)
	var recorded []string
	for e := range recorder.Events {
		recorded = append(recorded, e)
	}
	if !slices.ContainsFunc(recorded, func(e string) bool {
		return strings.HasPrefix(e, "Warning RolloutRolledBack") && strings.Contains(e, "template of revision 1 (old) is put back")
	}) {
		t.Errorf("Events %q, want a warning RolloutRolledBack naming revision 1", recorded)
	}
}

// A reconcile whose gate is not due yet asks Prometheus nothing and changes no template.
func TestReconcileMeasuresOnlyWhenAGateIsDue(t *testing.T) {
	in := analysing(gatedSettings(t, "1", true))
	in.Status.Analysis.Gates[0].Next = t0.Add(time.Second)
	r, c, analyzer, _ := gatedReconciler(t, in, errorsOf(0.5))
	got := reconcileAgent(t, r, c)
	if len(analyzer.requests) != 0 {
		t.Errorf("measured %+v before the gate was due", analyzer.requests)
	}
	if image := got.Spec.Template.Spec.Containers[0].Image; image != "agent:2" {
		t.Errorf("template runs %s, want agent:2 untouched", image)
	}
}

// A wave whose analysis starts is reported at once, even right after another report: when it
// started is the controller's memory, and a deferred report would start it again a moment later,
// delaying every wave's first measurement.
func TestDecideReportsAnAnalysisStartAtOnce(t *testing.T) {
	in := analysing(gatedSettings(t, "1", false))
	in.Status.Analysis = nil // the wave of w00 is up; its analysis has not started
	first := decide(factsOf(in, nil, nil))
	shown := map[string]string{}
	for k, v := range first.Annotations {
		if v != nil && k != rolloutapi.StatusAnalysis {
			shown[k] = *v
		}
	}
	if _, ok := first.Annotations[rolloutapi.StatusAnalysis]; !ok {
		t.Fatalf("the first reconcile starts no analysis: annotations %v", first.Annotations)
	}
	// The DaemonSet shows the same phase, step and counts, reported a moment ago, and no analysis.
	d := decide(reportedAt(factsOf(in, shown, first.Conditions), t0))
	if !d.Reported {
		t.Fatalf("the analysis start was deferred (requeue after %s)", d.RequeueAfter)
	}
	v := d.Annotations[rolloutapi.StatusAnalysis]
	if v == nil || !strings.Contains(*v, `"wave":1`) {
		t.Errorf("status analysis written %v, want the wave of one node started", v)
	}
}

// A gate without data, measured again and again, pauses the rollout with one Event; the same
// cause measured again records none, and another cause (Prometheus not answering) records one.
func TestDecideRecordsAnEventPerInconclusiveCause(t *testing.T) {
	noData := errorsOf(0)
	noData[0].Values = map[string]float64{"w01": 0}
	down := []rolloutanalysis.Measurement{{Gate: "errors", Err: "Prometheus unreachable"}}
	in := analysing(gatedSettings(t, "3", false))
	annotations := map[string]string{}
	var conds []appsv1.DaemonSetCondition
	for i, step := range []struct {
		measured  []rolloutanalysis.Measurement
		wantEvent bool
	}{{noData, true}, {noData, false}, {noData, false}, {down, true}, {down, false}, {noData, true}} {
		in.Measurements = step.measured
		d := decide(factsOf(in, annotations, conds))
		if (d.Event != nil) != step.wantEvent {
			t.Errorf("measurement %d: Event %+v, want one: %v", i, d.Event, step.wantEvent)
		}
		if d.Conditions != nil {
			conds = d.Conditions
		}
		if got := trueCondition(conds); got != "Paused/"+rolloutapi.ReasonAnalysisInconclusive {
			t.Fatalf("measurement %d: condition %s, want Paused/%s", i, got, rolloutapi.ReasonAnalysisInconclusive)
		}
		for k, v := range d.Annotations {
			if v == nil {
				delete(annotations, k)
			} else {
				annotations[k] = *v
			}
		}
		in.Status, in.Now = d.Plan.Status, in.Now.Add(d.RequeueAfter)
	}
}

// The reconcile that follows a report can read the new annotations with the old condition and
// plan the same Event again: within eventEcho it is not recorded twice; a different Event, or the
// same one later, is.
func TestSameEventAgainSkipsTheEchoOfALaggingCache(t *testing.T) {
	r := &Reconciler{}
	ds := managedAgent("ds-uid", "agent:2")
	paused := rolloutplan.Event{Type: corev1.EventTypeNormal, Reason: rolloutapi.EventPaused, Note: "inconclusive: no sample for w00"}
	other := paused
	other.Note = "inconclusive: no answer from Prometheus"
	for i, step := range []struct {
		event rolloutplan.Event
		at    time.Duration
		want  bool
	}{
		{paused, 0, false},
		{paused, 10 * time.Millisecond, true},
		{other, time.Second, false},
		{paused, 2 * time.Second, false},
		{paused, 2*time.Second + eventEcho, false},
	} {
		if got := r.sameEventAgain(ds, step.event, t0.Add(step.at)); got != step.want {
			t.Errorf("step %d (%s at +%s): same again %v, want %v", i, step.event.Note, step.at, got, step.want)
		}
	}
}
