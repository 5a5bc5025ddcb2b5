package rolloutplan

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// ForecastInput is what a forecast of a managed DaemonSet's rollout starts from: the DaemonSet as
// it will be stored, its pods and the nodes today, and how long a new pod takes to be Ready.
type ForecastInput struct {
	DaemonSet *appsv1.DaemonSet
	Pods      []*corev1.Pod // the DaemonSet's pods today
	Nodes     []*corev1.Node
	// ReadyAfter is how long a new pod takes from creation to Ready.
	ReadyAfter time.Duration
	Now        time.Time
}

// Wave is one reconcile's deletions: the pods the controller replaces together.
type Wave struct {
	At   time.Duration `json:"at"` // since the rollout starts
	Step string        `json:"step"`
	// StepIndex is the step's 0-based index: it orders a wave and a pause of the same moment.
	StepIndex int      `json:"stepIndex"`
	Nodes     []string `json:"nodes"`
}

// GateSummary is an analysis gate as the plan lists it.
type GateSummary struct {
	Name     string        `json:"name"`
	Query    string        `json:"query"`
	Interval time.Duration `json:"interval"`
	Count    int           `json:"count"`
	Baseline bool          `json:"baseline,omitempty"`
}

// PauseStep is a pause step the rollout reaches.
type PauseStep struct {
	At        time.Duration `json:"at"`
	Step      string        `json:"step"`
	StepIndex int           `json:"stepIndex"`
	// Duration of a timed pause; zero for a pause that waits for `daemonguard rollout resume`.
	Duration time.Duration `json:"duration,omitempty"`
	Manual   bool          `json:"manual,omitempty"`
}

// Timeline is the rollout the controller would run, reconcile by reconcile.
type Timeline struct {
	// Gates are the analysis gates measured after each wave; the forecast assumes they pass.
	Gates   []GateSummary `json:"gates,omitempty"`
	Desired int           `json:"desired"` // reachable nodes the rollout covers
	Budget  int           `json:"budget"`  // maxUnavailable as a node count
	Order   string        `json:"order"`   // how nodes are ordered, in the controller's words
	Skipped []string      `json:"skipped,omitempty"`
	Waves   []Wave        `json:"waves"`
	Pauses  []PauseStep   `json:"pauses,omitempty"`
	// Duration is from the first deletion until every node runs an available new pod, pauses
	// that wait for a resume counted as zero.
	Duration time.Duration `json:"duration"`
	// Outcome is how the rollout ends: the controller's last message (complete, halted, paused).
	Outcome  string `json:"outcome"`
	Complete bool   `json:"complete"`
}

// forecastRevision stands for the revision of the new template, which the DaemonSet controller
// names only once it is applied; no live pod carries it.
const forecastRevision = "new"

// Forecast runs the controller's own planner (StateOf, Compute) against a model of the
// cluster and records what it does: the rollout as the controller would run it, with its waves,
// pauses and duration.
//
// Assumptions:
//   - The DaemonSet controller recreates a deleted pod at once at the new revision (OnDelete),
//     and creates new pods at once on eligible nodes that have none.
//   - A deleted pod is gone at once: termination takes no time.
//   - Every new pod becomes Ready ReadyAfter after it is created and never fails; live pods keep
//     the readiness they have.
//   - Nodes neither join, leave nor change state during the rollout.
//   - Every measurement of an analysis gate passes, on every node of every wave; the time the
//     gates take (Count measurements, Interval apart, after each wave) is in the forecast.
//   - A pause that waits for `daemonguard rollout resume` is resumed at once; the paused
//     annotation stops the forecast.
//
// Invariants:
//   - Time moves only to the next moment something changes: a pod becomes Ready or available,
//     a timed pause ends, a deadline passes. So the forecast ends after a bounded number of
//     planner runs (each either deletes, advances a step or waits for one of those moments).
func Forecast(in ForecastInput) (Timeline, error) {
	return forecast(in, forecastSeams{})
}

// forecastSeams are test seams of forecast, each a check of one of its shortcuts.
type forecastSeams struct {
	// replanAlways plans again at the same moment after every write, Ready replacements or not,
	// which must not change the forecast.
	replanAlways bool
	// checkState compares, on every run, the state the simulation keeps pod by pod with StateOf
	// over every pod, and fails the forecast where they differ.
	checkState bool
}

// forecast is Forecast with test seams.
func forecast(in ForecastInput, seams forecastSeams) (Timeline, error) {
	settings, err := rolloutapi.ParseSettings(in.DaemonSet.Annotations)
	if err != nil {
		return Timeline{}, err
	}
	ds := in.DaemonSet.DeepCopy()
	ds.Status.Conditions = nil // the last rollout's report does not bear on the next
	in.Pods, in.Nodes = stripped(in.Pods, StripPod), stripped(in.Nodes, nodes.Strip)
	seen := Observed{Now: in.Now, DaemonSet: ds, Settings: settings, TargetRevision: forecastRevision}
	sim := newForecastSim(in, seen, time.Duration(ds.Spec.MinReadySeconds)*time.Second)
	var out Timeline
	lastStep := ""
	measurements := 0
	for _, g := range settings.Gates {
		measurements += g.Count + 1
	}
	runs := (8+measurements)*len(in.Nodes) + 4*len(settings.Steps) + 32
	for range runs {
		state := sim.state(seen)
		if seams.checkState {
			if err := sim.check(seen, state); err != nil {
				return out, err
			}
		}
		if req := dueAnalysis(state, &sim.scratch); req != nil {
			state.Measurements = passingMeasurements(settings.Gates, req)
		}
		plan := compute(state, &sim.scratch)
		if out.Waves == nil {
			for _, g := range settings.Gates {
				out.Gates = append(out.Gates, GateSummary{Name: g.Name, Query: g.Query, Interval: g.Interval, Count: g.Count, Baseline: g.Baseline})
			}
			out.Desired, out.Budget, out.Skipped = plan.Desired, plan.Budget, plan.Skipped
			out.Order = orderReason(settings.TopologyKey, "")
			if settings.TopologyKey != "" {
				out.Order = fmt.Sprintf("one %s at a time, workers before control-plane nodes, then by name", settings.TopologyKey)
			}
			out.Waves = []Wave{}
		}
		at := seen.Now.Sub(sim.start)
		step := plan.Status.Step.String()
		if step != lastStep && plan.Phase == rolloutapi.PhasePaused && plan.Reason != rolloutapi.ReasonPausedByAnnotation {
			idx := plan.Status.Step.Index
			ps := PauseStep{At: at, Step: step, StepIndex: idx}
			if st := settings.Steps[idx]; st.Kind == rolloutapi.StepTimedPause {
				ps.Duration = st.Duration
			} else {
				ps.Manual = true
			}
			out.Pauses = append(out.Pauses, ps)
		}
		lastStep = step
		seen.Status = plan.Status
		switch {
		case plan.Phase == rolloutapi.PhaseComplete:
			out.Duration, out.Outcome, out.Complete = at, plan.Message, true
			return out, nil
		case plan.Phase == rolloutapi.PhaseFailed, plan.Reason == rolloutapi.ReasonPausedByAnnotation:
			out.Duration, out.Outcome = at, plan.Message
			return out, nil
		case plan.Reason == rolloutapi.ReasonPausedAtStep:
			seen.Settings.ResumeToken = fmt.Sprintf("forecast-resume-%d", len(out.Pauses))
			continue
		}
		if len(plan.Delete) > 0 {
			w := Wave{At: at, Step: step, StepIndex: plan.Status.Step.Index}
			for _, d := range plan.Delete {
				sim.remove(types.UID(d.UID))
				w.Nodes = append(w.Nodes, d.Node)
			}
			w.Nodes = uniqueSorted(w.Nodes)
			out.Waves = append(out.Waves, w)
		}
		// A plan counts its own deletions against the budget and the step as the pods that
		// replace them would count, and moves steps only on available pods and on time. So the
		// planner, run again at this moment on replacements not yet Ready, deletes nothing more
		// and moves no step: only pods Ready at once (ReadyAfter zero) call for a second run now.
		created := sim.createMissing(seen.Now)
		if (created || len(plan.Delete) > 0) && (in.ReadyAfter == 0 || seams.replanAlways) {
			continue // plan again at the same moment, on the pods as they are now
		}
		next, ok := sim.nextChange(seen.Now, plan.RequeueAfter)
		if !ok {
			out.Duration, out.Outcome = at, "no progress: "+plan.Message
			return out, nil
		}
		seen.Now = next
	}
	return out, fmt.Errorf("forecast did not end after %d planner runs", runs)
}

// stripped is copies of objs as the controller's informers keep them (StripPod, nodes.Strip): the
// planner reads what the controller reads, and every run reads every pod and node, so a pod
// with one label and no spec but its node is read faster than the API's.
func stripped[T interface {
	*corev1.Pod | *corev1.Node
	DeepCopyObject() runtime.Object
}](objs []T, strip func(any) (any, error)) []T {
	out := make([]T, len(objs))
	for i, o := range objs {
		s, _ := strip(o.DeepCopyObject())
		out[i] = s.(T)
	}
	return out
}

// forecastSim is the modelled cluster: the live pods that remain and the new pods created, as an
// API server would hold them, and the Memo that classifies them for the planner, as the
// controller's reconciles classify the objects of its informers.
//
// Every pod of the simulation has a name and a UID, and a resourceVersion the simulation gives
// it and changes on each change, as each write through the API server does. The first run
// classifies every pod and node (Memo.StateOf); each later run names to the memo the pods
// created, made Ready and deleted since (Memo.applied), which it classifies alone: a forecast of
// one node at a time runs the planner about twice per node, so looking at every node and pod on
// every run would grow with the square of the nodes.
//
// Invariants:
//   - state(seen) equals StateOf(seen) over pods() and nodes (the checkState seam holds it on
//     every run of the forecast tests).
//   - written and gone are the changes since the last state: the pods created or made Ready,
//     and the names of the pods deleted.
//   - created is in creation order, so in order of readiness: moments never go back and every
//     new pod takes ReadyAfter.
type forecastSim struct {
	in       ForecastInput
	start    time.Time
	minReady time.Duration
	memo     Memo
	scratch  scratch        // the planner's memory, reused from run to run
	rv       int            // the last resourceVersion given
	nodes    []*corev1.Node // every node; the memo and StateOf put them in rollout order
	// removed are the live pods the planner deleted; they are gone at once.
	removed map[types.UID]bool
	created []simPod
	readied int // created[:readied] are Ready
	written []*corev1.Pod
	gone    []string
	// targets are the nodes the DaemonSet targets, in rollout order, and whether each is
	// reachable: the nodes the DaemonSet controller creates pods on. Nodes do not change.
	targets []simNode
	// live are the live pods not terminating on a target, by UID: the pods the planner deletes.
	live map[types.UID]simLive
}

// simNode is a node the DaemonSet targets.
type simNode struct {
	name      string
	reachable bool
	// occupied counts the node's pods not terminating (the live ones not removed, and the
	// created ones), kept up to date by remove and createMissing instead of counted per run.
	occupied int
}

// simLive is a live pod not terminating on a target.
type simLive struct {
	name string
	node int // index into targets
}

// newForecastSim is the cluster of in, its pods and nodes classified once (the memo's first
// StateOf) to find the targets and their pods.
func newForecastSim(in ForecastInput, seen Observed, minReady time.Duration) *forecastSim {
	s := &forecastSim{in: in, start: in.Now, minReady: minReady, removed: map[types.UID]bool{},
		live: map[types.UID]simLive{}}
	s.nodes = in.Nodes
	for _, n := range s.nodes {
		n.ResourceVersion = s.nextRV()
	}
	for _, p := range in.Pods {
		p.ResourceVersion = s.nextRV()
	}
	seen.Pods, seen.Nodes = in.Pods, s.nodes
	for i, n := range s.memo.StateOf(seen).Nodes {
		s.targets = append(s.targets, simNode{name: n.Name, reachable: n.Reachable})
		for _, p := range n.Pods {
			if !p.Terminating {
				s.live[types.UID(p.UID)] = simLive{name: p.Name, node: i}
				s.targets[i].occupied++
			}
		}
	}
	return s
}

// nextRV is a resourceVersion no object of the simulation had: the memo tells a pod that changed
// by it.
func (s *forecastSim) nextRV() string {
	s.rv++
	return strconv.Itoa(s.rv)
}

type simPod struct {
	at  time.Time
	pod *corev1.Pod // made Ready in place, with a new resourceVersion, once ReadyAfter has passed
}

// state is the planner's state at seen.Now, after the new pods due by now became Ready: the
// memo's, told what changed since the last run.
func (s *forecastSim) state(seen Observed) RolloutState {
	for ; s.readied < len(s.created); s.readied++ {
		c := s.created[s.readied]
		readyAt := c.at.Add(s.in.ReadyAfter)
		if seen.Now.Before(readyAt) {
			break
		}
		c.pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(readyAt)}}
		c.pod.ResourceVersion = s.nextRV()
		s.written = append(s.written, c.pod)
	}
	st, ok := s.memo.applied(seen, s.written, s.gone)
	if !ok {
		seen.Pods, seen.Nodes = s.pods(), s.nodes
		st = s.memo.StateOf(seen)
	}
	s.written, s.gone = s.written[:0], s.gone[:0]
	return st
}

// check fails when state is not StateOf over every pod and node as they are.
func (s *forecastSim) check(seen Observed, state RolloutState) error {
	seen.Pods, seen.Nodes = s.pods(), s.nodes
	if want := StateOf(seen); !reflect.DeepEqual(state, want) {
		return fmt.Errorf("the forecast's state at %s differs from StateOf:\n got %+v\nwant %+v", seen.Now.Sub(s.start), state, want)
	}
	return nil
}

// pods are the DaemonSet's pods: the live ones not deleted, and the new ones.
func (s *forecastSim) pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range s.in.Pods {
		if !s.removed[p.UID] {
			out = append(out, p)
		}
	}
	for _, c := range s.created {
		out = append(out, c.pod)
	}
	return out
}

func (s *forecastSim) remove(uid types.UID) {
	if s.removed[uid] {
		return
	}
	s.removed[uid] = true
	if l, ok := s.live[uid]; ok {
		s.gone = append(s.gone, l.name)
		s.targets[l.node].occupied--
	}
}

// createMissing is the DaemonSet controller: a new pod on every node of the rollout without one.
// It tells whether it created any.
func (s *forecastSim) createMissing(now time.Time) bool {
	created := false
	for i := range s.targets {
		n := &s.targets[i]
		if !n.reachable || n.occupied > 0 {
			continue
		}
		n.occupied++
		name := fmt.Sprintf("forecast-%d", len(s.created))
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, UID: types.UID(name), ResourceVersion: s.nextRV(), CreationTimestamp: metav1.NewTime(now),
				Labels: map[string]string{revisionLabel: forecastRevision},
			},
			Spec: corev1.PodSpec{NodeName: n.name},
		}
		s.created = append(s.created, simPod{at: now, pod: pod})
		s.written = append(s.written, pod)
		created = true
	}
	return created
}

// nextChange is the next moment the plan can change: a new pod becomes Ready or available, or the
// planner asked to come back (a timed pause ends, a deadline passes).
func (s *forecastSim) nextChange(now time.Time, requeue time.Duration) (time.Time, bool) {
	var next time.Time
	consider := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	// created is in order of readiness (see the invariants), so the first pod to become Ready,
	// or available, after now is found by bisection.
	for _, after := range []time.Duration{s.in.ReadyAfter, s.in.ReadyAfter + s.minReady} {
		i := sort.Search(len(s.created), func(i int) bool { return s.created[i].at.Add(after).After(now) })
		if i < len(s.created) {
			consider(s.created[i].at.Add(after))
		}
	}
	if requeue > 0 {
		consider(now.Add(requeue))
	}
	return next, !next.IsZero()
}

func uniqueSorted(in []string) []string {
	sort.Strings(in)
	out := in[:0]
	for i, s := range in {
		if i == 0 || s != in[i-1] {
			out = append(out, s)
		}
	}
	return out
}

// passingMeasurements are measurements of req that every gate passes on every node: the value at
// the gate's bound (bounds are inclusive), over a baseline of zeros. A forecast assumes them.
func passingMeasurements(gates []rolloutapi.Gate, req *rolloutanalysis.Request) []rolloutanalysis.Measurement {
	var out []rolloutanalysis.Measurement
	for _, q := range req.Queries {
		i := slices.IndexFunc(gates, func(g rolloutapi.Gate) bool { return g.Name == q.Gate })
		if i < 0 {
			continue
		}
		v := 0.0
		if g := gates[i]; g.Max != nil {
			v = *g.Max
		} else if g.Min != nil {
			v = *g.Min
		}
		m := rolloutanalysis.Measurement{Gate: q.Gate, Values: map[string]float64{}, Baseline: map[string]float64{}}
		for _, n := range req.Wave {
			m.Values[n] = v
		}
		for _, n := range req.BaselineNodes {
			m.Baseline[n] = 0
		}
		out = append(out, m)
	}
	return out
}
