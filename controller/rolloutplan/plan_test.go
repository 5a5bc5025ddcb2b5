package rolloutplan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

var t0 = time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)

const (
	oldRev = "old"
	newRev = "new"
)

// nodeOpt adjusts a test node.
type nodeOpt func(*NodeState)

func node(name string, opts ...nodeOpt) NodeState {
	n := NodeState{Name: name, Reachable: true}
	for _, o := range opts {
		o(&n)
	}
	return n
}

// pod adds a pod; state is one of: ready, notready, terminating, failing.
func pod(rev, state string) nodeOpt {
	return func(n *NodeState) {
		p := PodState{Name: fmt.Sprintf("%s-%s-%d", n.Name, rev, len(n.Pods)), UID: fmt.Sprintf("uid-%s-%d", n.Name, len(n.Pods)), Revision: rev}
		switch state {
		case "ready":
			p.Ready, p.ReadySince = true, t0.Add(-time.Hour)
		case "terminating":
			p.Terminating, p.DeletedAt = true, t0.Add(-10*time.Second)
		case "stuck":
			p.Terminating, p.DeletedAt = true, t0.Add(-time.Hour)
		case "failing":
			p.Failure = "ImagePullBackOff"
		}
		n.Pods = append(n.Pods, p)
	}
}

func controlPlane(n *NodeState) { n.ControlPlane = true }
func unreachable(n *NodeState)  { n.Reachable = false }
func zone(z string) nodeOpt     { return func(n *NodeState) { n.Domain = z } }
func olds(n int) []NodeState {
	var out []NodeState
	for i := range n {
		out = append(out, node(fmt.Sprintf("w%02d", i), pod(oldRev, "ready")))
	}
	return out
}

func settings(maxUnavailable string, steps string) rolloutapi.Settings {
	s, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationMaxUnavailable: maxUnavailable, rolloutapi.AnnotationSteps: steps})
	if err != nil {
		panic(err)
	}
	return s
}

func deletedNodes(p Plan) []string {
	var out []string
	for _, d := range p.Delete {
		out = append(out, d.Node)
	}
	return out
}

func TestCompute(t *testing.T) {
	running := rolloutapi.Status{Revision: newRev, StepStarted: t0.Add(-time.Minute), Progress: t0.Add(-time.Minute)}
	tests := map[string]struct {
		nodes       []NodeState
		settings    rolloutapi.Settings
		state       rolloutapi.Status
		wantDelete  []string // nodes whose pods are deleted, in order
		wantPhase   rolloutapi.Phase
		wantReason  string
		wantInMsg   string
		wantUpdated int
	}{
		"a fresh rollout deletes one pod under the default budget": {
			nodes: olds(4), settings: settings("1", ""), state: rolloutapi.Status{},
			wantDelete: []string{"w00"}, wantPhase: rolloutapi.PhaseProgressing,
		},
		"a percent budget rounds up: 10% of 20 is 2": {
			nodes: olds(20), settings: settings("10%", ""), state: running,
			wantDelete: []string{"w00", "w01"}, wantPhase: rolloutapi.PhaseProgressing,
		},
		"an unavailable new pod uses the budget": {
			nodes:    append([]NodeState{node("a", pod(newRev, "notready"))}, olds(3)...),
			settings: settings("1", ""), state: running,
			wantPhase: rolloutapi.PhaseProgressing, wantInMsg: "1 unavailable of budget 1",
		},
		"old pods that are already unavailable are replaced without budget": {
			nodes: []NodeState{
				node("a", pod(newRev, "notready")), node("b", pod(oldRev, "notready")), node("c", pod(oldRev, "notready")), node("d", pod(oldRev, "ready")),
			},
			settings: settings("1", ""), state: running,
			wantDelete: []string{"b", "c"}, wantPhase: rolloutapi.PhaseProgressing,
		},
		"control-plane nodes go last": {
			nodes:    []NodeState{node("a-cp", controlPlane, pod(oldRev, "ready")), node("z-worker", pod(oldRev, "ready"))},
			settings: settings("1", ""), state: running,
			wantDelete: []string{"z-worker"}, wantPhase: rolloutapi.PhaseProgressing,
		},
		"one zone at a time: zone-b waits while zone-a has a pod starting": {
			nodes: []NodeState{
				node("a1", zone("zone-a"), pod(newRev, "notready")), node("a2", zone("zone-a"), pod(oldRev, "ready")),
				node("b1", zone("zone-b"), pod(oldRev, "ready")),
			},
			settings: func() rolloutapi.Settings { s := settings("2", ""); s.TopologyKey = "zone"; return s }(), state: running,
			wantDelete: []string{"a2"}, wantPhase: rolloutapi.PhaseProgressing,
		},
		"unreachable nodes are left out and do not hold the budget": {
			nodes: append([]NodeState{
				node("down-1", unreachable, pod(oldRev, "notready")), node("down-2", unreachable, pod(oldRev, "notready")),
				node("down-3", unreachable, pod(oldRev, "notready")),
			}, olds(3)...),
			settings: settings("1", ""), state: running,
			wantDelete: []string{"w00"}, wantPhase: rolloutapi.PhaseProgressing, wantInMsg: "3 nodes left out",
		},
		"a pod stuck terminating does not hold the budget forever": {
			nodes:    append([]NodeState{node("s", pod(oldRev, "stuck"))}, olds(2)...),
			settings: settings("1", ""), state: running,
			wantDelete: []string{"w00"}, wantPhase: rolloutapi.PhaseProgressing, wantInMsg: "pod stuck terminating",
		},
		"a recently terminating pod counts once against the budget": {
			nodes:    append([]NodeState{node("t", pod(oldRev, "terminating"), pod(newRev, "notready"))}, olds(2)...),
			settings: settings("1", ""), state: running,
			wantPhase: rolloutapi.PhaseProgressing, wantInMsg: "1 unavailable of budget 1",
		},
		"a failing new pod halts the rollout and names the node": {
			nodes:    append([]NodeState{node("bad", pod(newRev, "failing"))}, olds(3)...),
			settings: settings("2", ""), state: running,
			wantPhase: rolloutapi.PhaseFailed, wantReason: "PodFailure", wantInMsg: "bad: ImagePullBackOff",
		},
		"a failed revision stays failed with no deletions": {
			nodes:    append([]NodeState{node("a", pod(newRev, "notready"))}, olds(3)...),
			settings: settings("2", ""), state: rolloutapi.Status{Revision: newRev, FailedRevision: newRev, StepStarted: t0, Progress: t0},
			wantPhase: rolloutapi.PhaseFailed, wantReason: "RolloutFailed",
		},
		"a new revision rolls forward from a failed one": {
			nodes:    olds(3),
			settings: settings("1", ""), state: rolloutapi.Status{Revision: "older", FailedRevision: "older", StepStarted: t0, Progress: t0},
			wantDelete: []string{"w00"}, wantPhase: rolloutapi.PhaseProgressing,
		},
		"no progress within the deadline fails the rollout": {
			nodes:    append([]NodeState{node("slow", pod(newRev, "notready"))}, olds(3)...),
			settings: settings("1", ""), state: rolloutapi.Status{Revision: newRev, StepStarted: t0.Add(-time.Hour), Progress: t0.Add(-time.Hour)},
			wantPhase: rolloutapi.PhaseFailed, wantReason: "ProgressDeadlineExceeded", wantInMsg: "slow",
		},
		"the paused annotation stops all deletions": {
			nodes:    olds(3),
			settings: func() rolloutapi.Settings { s := settings("1", ""); s.Paused = true; return s }(), state: running,
			wantPhase: rolloutapi.PhasePaused, wantReason: "PausedByAnnotation",
		},
		"a canary step of 1 node stops at 1 even with budget left": {
			nodes:    append([]NodeState{node("canary", pod(newRev, "notready"))}, olds(3)...),
			settings: settings("3", "1,pause,100%"), state: running,
			wantPhase: rolloutapi.PhaseProgressing, wantInMsg: "0 of 4 nodes updated, 1 unavailable of budget 3",
		},
		"an indefinite pause holds after the canary is available": {
			nodes:    append([]NodeState{node("canary", pod(newRev, "ready"))}, olds(3)...),
			settings: settings("3", "1,pause,100%"), state: running,
			wantPhase: rolloutapi.PhasePaused, wantReason: "PausedAtStep", wantUpdated: 1,
		},
		"changing the resume token continues past the pause": {
			nodes:      append([]NodeState{node("canary", pod(newRev, "ready"))}, olds(3)...),
			settings:   func() rolloutapi.Settings { s := settings("3", "1,pause,100%"); s.ResumeToken = "go"; return s }(),
			state:      rolloutapi.Status{Revision: newRev, Step: rolloutapi.StepPosition{Index: 1}, StepStarted: t0.Add(-time.Minute), Progress: t0, PauseToken: ""},
			wantDelete: []string{"w00", "w01", "w02"}, wantPhase: rolloutapi.PhaseProgressing, wantUpdated: 1,
		},
		"a timed pause waits out its duration": {
			nodes:    append([]NodeState{node("canary", pod(newRev, "ready"))}, olds(3)...),
			settings: settings("3", "1,pause:5m,100%"), state: rolloutapi.Status{Revision: newRev, Step: rolloutapi.StepPosition{Index: 1}, StepStarted: t0.Add(-time.Minute), Progress: t0},
			wantPhase: rolloutapi.PhasePaused, wantReason: "TimedPause", wantInMsg: "4m0s more", wantUpdated: 1,
		},
		"every node updated is complete": {
			nodes:    []NodeState{node("a", pod(newRev, "ready")), node("b", pod(newRev, "ready"))},
			settings: settings("1", ""), state: running,
			wantPhase: rolloutapi.PhaseComplete, wantUpdated: 2,
		},
		"a node added after the last step is still rolled": {
			nodes:    []NodeState{node("a", pod(newRev, "ready")), node("new-node")},
			settings: settings("1", "1,100%"), state: rolloutapi.Status{Revision: newRev, Step: rolloutapi.StepPosition{Index: 2}, StepStarted: t0, Progress: t0},
			wantPhase: rolloutapi.PhaseProgressing, wantUpdated: 1,
		},
		"a node added long after completion: its pod gets the progress deadline from now": {
			nodes:    []NodeState{node("a", pod(newRev, "ready")), node("joined", pod(newRev, "notready"))},
			settings: settings("1", ""), state: rolloutapi.Status{Revision: newRev, Step: rolloutapi.StepPosition{Index: 1}, StepStarted: t0.Add(-48 * time.Hour), Progress: t0.Add(-48 * time.Hour), ProgressUpdated: 1},
			wantPhase: rolloutapi.PhaseProgressing, wantReason: rolloutapi.ReasonProgressing, wantInMsg: "1 of 2 nodes updated, 1 unavailable of budget 1", wantUpdated: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := Compute(RolloutState{TargetRevision: newRev, Nodes: tc.nodes, Settings: tc.settings, Status: tc.state, Now: t0})
			if got := deletedNodes(p); !slices.Equal(got, tc.wantDelete) {
				t.Errorf("deleted on %v, want %v (%s)", got, tc.wantDelete, p.Message)
			}
			if p.Phase != tc.wantPhase || (tc.wantReason != "" && p.Reason != tc.wantReason) {
				t.Errorf("phase %s/%s, want %s/%s: %s", p.Phase, p.Reason, tc.wantPhase, tc.wantReason, p.Message)
			}
			if !strings.Contains(p.Message, tc.wantInMsg) {
				t.Errorf("message %q lacks %q", p.Message, tc.wantInMsg)
			}
			if p.Updated != tc.wantUpdated {
				t.Errorf("updated %d, want %d", p.Updated, tc.wantUpdated)
			}
		})
	}
}

// Every halt says its cause, which nodes' new pods are not available and since when (the first
// three, and how many more), and what to do; later reconciles keep the cause the first one found.
func TestHaltMessages(t *testing.T) {
	notReadySince := func(at time.Time) nodeOpt {
		return func(n *NodeState) { n.Pods[len(n.Pods)-1].NotReadySince = at }
	}
	deadlineHit := rolloutapi.Status{Revision: newRev, StepStarted: t0.Add(-time.Hour), Progress: t0.Add(-time.Hour)}
	halted := rolloutapi.Status{Revision: newRev, FailedRevision: newRev, StepStarted: t0.Add(-time.Hour), Progress: t0.Add(-time.Hour)}
	undo := "; no further pods are replaced; fix the template and apply it to roll forward, or roll back with: daemonguard rollout undo ds/agent -n mon"
	tests := map[string]struct {
		nodes    []NodeState
		state    rolloutapi.Status
		previous string // reason of the Failed condition before this reconcile
		steps    string
		reason   string
		message  string
	}{
		"the progress deadline passes with new pods Running but never Ready": {
			nodes: append([]NodeState{node("slow", pod(newRev, "notready"), notReadySince(t0.Add(-50*time.Minute)))}, olds(3)...),
			state: deadlineHit, steps: "1,100%", reason: rolloutapi.ReasonProgressDeadline,
			message: "step 1/2 (1): new pods not Ready within the progress deadline of 10m0s; new pods not available on 1 of 4 nodes: slow: not Ready since 2026-11-23T09:10:00Z" + undo,
		},
		"a failure on many nodes names three and counts the rest": {
			nodes: []NodeState{
				node("a", pod(newRev, "failing"), notReadySince(t0.Add(-2*time.Minute))), node("b", pod(newRev, "failing")),
				node("c", pod(newRev, "notready"), notReadySince(t0.Add(-time.Minute))), node("d", pod(newRev, "failing")),
				node("e", pod(newRev, "failing")), node("f", pod(oldRev, "ready")),
			},
			state: rolloutapi.Status{Revision: newRev, StepStarted: t0, Progress: t0}, reason: rolloutapi.ReasonPodFailure,
			message: "step 1/1 (100%): new pods fail; new pods not available on 5 of 6 nodes: a: ImagePullBackOff since 2026-11-23T09:58:00Z, b: ImagePullBackOff, c: not Ready since 2026-11-23T09:59:00Z and 2 more" + undo,
		},
		"a node whose old pod is gone and whose new pod is not created yet": {
			nodes: []NodeState{node("empty"), node("bad", pod(newRev, "failing"))},
			state: rolloutapi.Status{Revision: newRev, StepStarted: t0, Progress: t0}, reason: rolloutapi.ReasonPodFailure,
			message: "step 1/1 (100%): new pods fail; new pods not available on 2 of 2 nodes: bad: ImagePullBackOff, empty: no pod yet" + undo,
		},
		"a rollout halted by the deadline keeps saying so": {
			nodes: append([]NodeState{node("slow", pod(newRev, "notready"), notReadySince(t0.Add(-50*time.Minute)))}, olds(3)...),
			state: halted, previous: rolloutapi.ReasonProgressDeadline, reason: rolloutapi.ReasonProgressDeadline,
			message: "step 1/1 (100%): new pods not Ready within the progress deadline of 10m0s; new pods not available on 1 of 4 nodes: slow: not Ready since 2026-11-23T09:10:00Z" + undo,
		},
		"a crash-looping pod between two crashes keeps the pod failure": {
			nodes: append([]NodeState{node("loop", pod(newRev, "notready"), notReadySince(t0.Add(-3*time.Minute)))}, olds(1)...),
			state: halted, previous: rolloutapi.ReasonPodFailure, reason: rolloutapi.ReasonPodFailure,
			message: "step 1/1 (100%): new pods failed; new pods not available on 1 of 2 nodes: loop: not Ready since 2026-11-23T09:57:00Z" + undo,
		},
		"a reconcile that sees the halt's annotations before its condition finds the deadline passed": {
			nodes: append([]NodeState{node("slow", pod(newRev, "notready"), notReadySince(t0.Add(-50*time.Minute)))}, olds(3)...),
			state: halted, reason: rolloutapi.ReasonProgressDeadline,
			message: "step 1/1 (100%): new pods not Ready within the progress deadline of 10m0s; new pods not available on 1 of 4 nodes: slow: not Ready since 2026-11-23T09:10:00Z" + undo,
		},
		"a failure of unknown cause names the revision": {
			nodes: append([]NodeState{node("x", pod(newRev, "notready"))}, olds(1)...),
			state: rolloutapi.Status{Revision: newRev, FailedRevision: newRev, StepStarted: t0, Progress: t0}, reason: rolloutapi.ReasonRolloutFailed,
			message: "step 1/1 (100%): the rollout of revision new failed; new pods not available on 1 of 2 nodes: x: not Ready" + undo,
		},
		"a halted rollout whose new pods recovered": {
			nodes: append([]NodeState{node("x", pod(newRev, "ready"))}, olds(1)...),
			state: halted, previous: rolloutapi.ReasonProgressDeadline, reason: rolloutapi.ReasonProgressDeadline,
			message: "step 1/1 (100%): new pods not Ready within the progress deadline of 10m0s; no new pod is unavailable now" + undo,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := Compute(RolloutState{Name: "agent", Namespace: "mon", TargetRevision: newRev, Nodes: tc.nodes, Settings: settings("1", tc.steps),
				Status: tc.state, PreviousFailure: tc.previous, Now: t0})
			if p.Phase != rolloutapi.PhaseFailed || p.Reason != tc.reason {
				t.Fatalf("phase %s/%s, want Failed/%s: %s", p.Phase, p.Reason, tc.reason, p.Message)
			}
			if p.Message != tc.message {
				t.Errorf("message\n %q\nwant\n %q", p.Message, tc.message)
			}
			if want := (Event{Type: "Warning", Reason: "RolloutFailed", Note: tc.reason + ": " + tc.message, FailureReason: tc.reason}); p.Event != want {
				t.Errorf("event %+v, want %+v", p.Event, want)
			}
			if len(p.Delete) > 0 {
				t.Errorf("a halted rollout deletes %v", deletedNodes(p))
			}
		})
	}
}

// A controller restarted at any point gets the same plan from the same cluster state and status
// annotations: the plan depends on nothing else.
func TestComputeIsDeterministic(t *testing.T) {
	in := RolloutState{TargetRevision: newRev, Nodes: olds(10), Settings: settings("3", "2,pause:1m,100%"), Status: rolloutapi.Status{}, Now: t0}
	first := Compute(in)
	for range 20 {
		if again := Compute(in); !slices.Equal(deletedNodes(again), deletedNodes(first)) || again.Message != first.Message {
			t.Fatalf("plans differ: %v vs %v", deletedNodes(again), deletedNodes(first))
		}
	}
}

// Property: for random node, pod and revision states, a plan never deletes a pod at the target
// revision, never deletes on an unreachable node or a terminating pod, deletes nothing when paused
// or failed, and never takes more nodes down than the budget allows.
func TestComputePropertiesHoldForRandomStates(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 5000 {
		in := randomState(rng)
		nodes, s := in.Nodes, in.Settings
		p := Compute(in)

		byUID := map[string]struct {
			pod  PodState
			node NodeState
		}{}
		for _, nd := range nodes {
			for _, pd := range nd.Pods {
				byUID[pd.UID] = struct {
					pod  PodState
					node NodeState
				}{pd, nd}
			}
		}
		if (s.Paused || p.Phase == rolloutapi.PhaseFailed || p.Phase == rolloutapi.PhasePaused) && len(p.Delete) > 0 {
			t.Fatalf("case %d: %s plan deletes %v", i, p.Phase, deletedNodes(p))
		}
		availableNodes := map[string]bool{} // budget is per node: two pods on one node count once
		for _, d := range p.Delete {
			x := byUID[d.UID]
			switch {
			case x.pod.Revision == newRev:
				t.Fatalf("case %d: deletes new-revision pod %s", i, d.Name)
			case !x.node.Reachable:
				t.Fatalf("case %d: deletes on unreachable node %s", i, d.Node)
			case x.pod.Terminating:
				t.Fatalf("case %d: deletes terminating pod %s", i, d.Name)
			}
			if x.pod.Ready {
				availableNodes[d.Node] = true
			}
		}
		if p.Phase == rolloutapi.PhaseFailed {
			// Every halt names its cause, the nodes (at most kubetext.ListedItems of them by name) and the
			// way out; the Event says what the condition says.
			if !strings.Contains(p.Message, "; no further pods are replaced; fix the template") || !strings.Contains(p.Message, "daemonguard rollout undo ds/") {
				t.Fatalf("case %d: failure message %q lacks what to do", i, p.Message)
			}
			if named := strings.Count(p.Message, " since ") + strings.Count(p.Message, ": no pod yet"); named > kubetext.ListedItems {
				t.Fatalf("case %d: failure message names %d nodes: %q", i, named, p.Message)
			}
		}
		if want := rolloutEvent(p.Phase, p.Reason, p.Message); p.Event != want || !strings.Contains(p.Event.Note, p.Message) {
			t.Fatalf("case %d: event %+v, want %+v", i, p.Event, want)
		}
		availableDeleted := len(availableNodes)
		if availableDeleted > 0 && p.Unavailable+availableDeleted > p.Budget {
			t.Fatalf("case %d: %d unavailable + %d available pods deleted exceeds budget %d: %s\nnodes: %+v", i, p.Unavailable, availableDeleted, p.Budget, p.Message, nodes)
		}
	}
}

// randomState is a random rollout at t0 toward newRev: up to 30 nodes, some unreachable or
// control-plane, each with up to two pods of either revision in any state; random budgets,
// steps, pauses and topology; a status at any step, failed or fresh.
func randomState(rng *rand.Rand) RolloutState {
	states := []string{"ready", "ready", "ready", "notready", "terminating", "stuck", "failing"}
	n := 1 + rng.IntN(30)
	var nodes []NodeState
	for j := range n {
		var opts []nodeOpt
		if rng.IntN(8) == 0 {
			opts = append(opts, unreachable)
		}
		if rng.IntN(6) == 0 {
			opts = append(opts, controlPlane)
		}
		opts = append(opts, zone(fmt.Sprintf("z%d", rng.IntN(3))))
		for range rng.IntN(3) { // 0, 1 or 2 pods
			rev := oldRev
			if rng.IntN(3) == 0 {
				rev = newRev
			}
			opts = append(opts, pod(rev, states[rng.IntN(len(states))]))
		}
		nodes = append(nodes, node(fmt.Sprintf("n%02d", j), opts...))
	}
	s := settings([]string{"1", "2", "5", "10%", "50%"}[rng.IntN(5)], []string{"", "1,pause,100%", "25%,pause:1m,100%", "3,50%,100%"}[rng.IntN(4)])
	s.Paused = rng.IntN(10) == 0
	if rng.IntN(3) == 0 {
		s.TopologyKey = "zone"
	}
	state := rolloutapi.Status{Revision: newRev, Step: rolloutapi.StepPosition{Index: rng.IntN(len(s.Steps) + 1)}, StepStarted: t0.Add(-time.Duration(rng.IntN(20)) * time.Minute), Progress: t0.Add(-time.Duration(rng.IntN(20)) * time.Minute)}
	if rng.IntN(10) == 0 {
		state.FailedRevision = newRev
	}
	if rng.IntN(5) == 0 {
		state = rolloutapi.Status{}
	}
	return RolloutState{TargetRevision: newRev, Nodes: nodes, Settings: s, Status: state, Now: t0}
}
