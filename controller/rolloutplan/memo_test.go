package rolloutplan

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// memoCluster is a small cluster that changes as an API server changes it: every write is a new
// object with a new resourceVersion, the old one left as it was (as an informer cache holds it).
type memoCluster struct {
	rng   *rand.Rand
	rv    int
	ds    *appsv1.DaemonSet
	topo  string
	nodes []*corev1.Node
	pods  []*corev1.Pod
	// deleted are the pods "this process" deleted (Observed.Deleted), numbered by deletedGen
	// (Observed.DeletedGen) in a cluster of an even seed, renumbered on each change; 0 in the
	// others.
	deleted    map[types.UID]time.Time
	deletedGen uint64
	created    int
}

// deletedChanged renumbers deleted, if the cluster numbers it.
func (c *memoCluster) deletedChanged() {
	if c.deletedGen != 0 {
		c.deletedGen++
	}
}

func (c *memoCluster) nextRV() string {
	c.rv++
	return strconv.Itoa(c.rv)
}

func newMemoCluster(seed uint64, n int) *memoCluster {
	c := &memoCluster{rng: rand.New(rand.NewPCG(seed, seed)), deleted: map[types.UID]time.Time{}, deletedGen: 1 - seed%2}
	c.ds = &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "platform", UID: "ds-uid"}}
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		c.nodes = append(c.nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: c.nextRV(),
				Labels: map[string]string{"zone": fmt.Sprintf("z%d", i%3), "pool": "a"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
		c.addPod(name)
	}
	return c
}

func (c *memoCluster) addPod(node string) {
	c.created++
	name := fmt.Sprintf("agent-%d", c.created)
	c.pods = append(c.pods, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: c.nextRV(),
			Labels: map[string]string{revisionLabel: oldRev}, CreationTimestamp: metav1.NewTime(t0)},
		Spec: corev1.PodSpec{NodeName: node},
	})
}

// writeNode is a new version of node i, as a write through the API server makes it.
func (c *memoCluster) writeNode(i int) *corev1.Node {
	n := c.nodes[i].DeepCopy()
	n.ResourceVersion = c.nextRV()
	c.nodes[i] = n
	return n
}

// change makes one random write, or a change of what the controller holds (deleted, the
// topology key), and names it.
func (c *memoCluster) change(now time.Time) string {
	pod := func() (int, *corev1.Pod) {
		i := c.rng.IntN(len(c.pods))
		p := c.pods[i].DeepCopy()
		p.ResourceVersion = c.nextRV()
		c.pods[i] = p
		return i, p
	}
	node := func() *corev1.Node { return c.writeNode(c.rng.IntN(len(c.nodes))) }
	switch c.rng.IntN(16) {
	case 0:
		_, p := pod()
		status := corev1.ConditionTrue
		if len(p.Status.Conditions) > 0 && p.Status.Conditions[0].Status == corev1.ConditionTrue {
			status = corev1.ConditionFalse
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: metav1.NewTime(now)}}
		return "a pod's readiness flipped"
	case 1:
		_, p := pod()
		p.DeletionTimestamp = &metav1.Time{Time: now}
		return "a pod started terminating"
	case 2:
		i := c.rng.IntN(len(c.pods))
		c.pods = append(c.pods[:i:i], c.pods[i+1:]...)
		return "a pod was deleted"
	case 3:
		c.addPod(c.nodes[c.rng.IntN(len(c.nodes))].Name)
		return "a pod was created"
	case 4:
		_, p := pod()
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		return "a pod's container crash-looped"
	case 5:
		_, p := pod()
		p.Labels = map[string]string{revisionLabel: newRev}
		return "a pod's revision changed"
	case 6:
		c.deleted[c.pods[c.rng.IntN(len(c.pods))].UID] = now
		c.deletedChanged()
		return "the controller deleted a pod"
	case 7:
		clear(c.deleted)
		c.deletedChanged()
		return "the controller forgot its deletions"
	case 8:
		n := node()
		n.Labels["zone"] = fmt.Sprintf("z%d", c.rng.IntN(4))
		if c.rng.IntN(2) == 0 {
			n.Labels["pool"] = "b"
		} else {
			n.Labels["pool"] = "a"
		}
		return "a node's labels changed"
	case 9:
		n := node()
		if len(n.Spec.Taints) > 0 {
			n.Spec.Taints = nil
		} else {
			key := []string{corev1.TaintNodeUnreachable, "dedicated"}[c.rng.IntN(2)]
			n.Spec.Taints = []corev1.Taint{{Key: key, Effect: corev1.TaintEffectNoSchedule}}
		}
		return "a node's taints changed"
	case 10:
		n := node()
		n.Status.Conditions[0].Status = map[corev1.ConditionStatus]corev1.ConditionStatus{
			corev1.ConditionTrue: corev1.ConditionFalse, corev1.ConditionFalse: corev1.ConditionTrue}[n.Status.Conditions[0].Status]
		return "a node's readiness flipped"
	case 13:
		_, p := pod()
		if p.Spec.NodeName == "" {
			p.Spec.NodeName = c.nodes[c.rng.IntN(len(c.nodes))].Name
		} else {
			p.Spec.NodeName = ""
		}
		return "a pod lost or found its node"
	case 14:
		_, p := pod()
		c.created++
		p.UID = types.UID(fmt.Sprintf("agent-uid-%d", c.created))
		return "a pod was created again under its name"
	case 15:
		// Built by hand: an API server gives every pod its own UID.
		_, p := pod()
		p.UID = c.pods[c.rng.IntN(len(c.pods))].UID
		return "a pod took another pod's UID"
	case 11:
		// A new template: another node selector or tolerations, in a new object as the
		// controller Gets it on each reconcile.
		ds := c.ds.DeepCopy()
		switch c.rng.IntN(3) {
		case 0:
			ds.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "a"}
		case 1:
			ds.Spec.Template.Spec.NodeSelector = nil
		default:
			ds.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		}
		c.ds = ds
		return "the template changed"
	default:
		c.topo = []string{"", "zone"}[c.rng.IntN(2)]
		return "the topology key changed"
	}
}

func (c *memoCluster) observed(now time.Time) Observed {
	o := Observed{Now: now, DaemonSet: c.ds, TargetRevision: newRev, Deleted: c.deleted, DeletedGen: c.deletedGen}
	o.Settings.TopologyKey = c.topo
	// Lists in a new order each time, as an informer's store lists them.
	o.Pods, o.Nodes = append([]*corev1.Pod(nil), c.pods...), append([]*corev1.Node(nil), c.nodes...)
	c.rng.Shuffle(len(o.Pods), func(i, j int) { o.Pods[i], o.Pods[j] = o.Pods[j], o.Pods[i] })
	c.rng.Shuffle(len(o.Nodes), func(i, j int) { o.Nodes[i], o.Nodes[j] = o.Nodes[j], o.Nodes[i] })
	return o
}

// TestMemoStateOfIsStateOf holds the Memo to its promise: over random sequences of writes to
// pods and nodes (a pod created again under its name, or, built by hand, with another pod's
// UID), template and topology-key changes and the controller's own deletions, the memoised
// StateOf equals StateOf of the same objects, and the memo holds no more entries than the last
// call read.
func TestMemoStateOfIsStateOf(t *testing.T) {
	for seed := range uint64(40) {
		c := newMemoCluster(seed, 12)
		var m Memo
		c.steps(60, 3, time.Second, c.change, func(step int, done []string, o Observed) {
			got, want := podsByName(m.StateOf(o)), podsByName(StateOf(o))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, step %d, after %v: memoised StateOf differs:\n got %+v\nwant %+v", seed, step, done, got, want)
			}
			checkMemoSize(t, &m, o, fmt.Sprintf("seed %d, step %d", seed, step))
		})
	}
}

// checkMemoSize fails t if the memo keeps more entries, by any key, than the last call read.
func checkMemoSize(t *testing.T, m *Memo, o Observed, at string) {
	t.Helper()
	if len(m.pods) > len(o.Pods) || len(m.byUID) > len(o.Pods) || len(m.podAt) > len(o.Pods) || len(m.nodes) > len(o.Nodes) || len(m.nodeAt) > len(o.Nodes) {
		t.Fatalf("%s: the memo keeps %d pods (%d by UID, %d by address) and %d nodes (%d by address) for %d and %d read",
			at, len(m.pods), len(m.byUID), len(m.podAt), len(m.nodes), len(m.nodeAt), len(o.Pods), len(o.Nodes))
	}
}

// steps makes n rounds of 1 to most random changes (change), every apart, and hands check the
// objects as observed after each round, and what the round did.
func (c *memoCluster) steps(n, most int, every time.Duration, change func(time.Time) string, check func(step int, done []string, o Observed)) {
	now := t0
	for step := range n {
		var done []string
		for range 1 + c.rng.IntN(most) {
			done = append(done, change(now))
		}
		now = now.Add(every)
		check(step, done, c.observed(now))
	}
}

// TestMemoClassifiesObjectsWithoutVersion: objects built by hand, without a resourceVersion,
// have no identity to remember, so a change made in place is seen.
func TestMemoClassifiesObjectsWithoutVersion(t *testing.T) {
	c := newMemoCluster(1, 3)
	for _, p := range c.pods {
		p.ResourceVersion = ""
	}
	for _, n := range c.nodes {
		n.ResourceVersion = ""
	}
	var m Memo
	m.StateOf(c.observed(t0))
	c.pods[0].Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	c.nodes[0].Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}}
	o := c.observed(t0)
	if got, want := podsByName(m.StateOf(o)), podsByName(StateOf(o)); !reflect.DeepEqual(got, want) {
		t.Fatalf("memoised StateOf differs:\n got %+v\nwant %+v", got, want)
	}
	// Two pods of one name, as no cache holds them.
	twin := c.pods[1].DeepCopy()
	twin.UID, twin.Spec.NodeName = "twin", c.nodes[2].Name
	o.Pods = append(o.Pods, twin)
	if got, want := podsByName(m.StateOf(o)), podsByName(StateOf(o)); !reflect.DeepEqual(got, want) {
		t.Fatalf("memoised StateOf of two pods of one name differs:\n got %+v\nwant %+v", got, want)
	}
	var nilMemo *Memo
	if got, want := nilMemo.StateOf(o), StateOf(o); !reflect.DeepEqual(got, want) {
		t.Fatalf("a nil memo's StateOf differs:\n got %+v\nwant %+v", got, want)
	}
}

// TestMemoFindsObjectsByName: the address of an object only hints at its entry. An object renamed
// in place, its UID and resourceVersion kept (built by hand: an API server writes a new
// version), is the object of its new name, as StateOf reads it.
func TestMemoFindsObjectsByName(t *testing.T) {
	c := newMemoCluster(1, 3)
	var m Memo
	m.StateOf(c.observed(t0))
	c.pods[0].Name = "renamed"
	c.nodes[1].Name = "renamed"
	c.pods[1].Spec.NodeName = "renamed"
	c.pods[1].ResourceVersion = c.nextRV()
	o := c.observed(t0)
	if got, want := podsByName(m.StateOf(o)), podsByName(StateOf(o)); !reflect.DeepEqual(got, want) {
		t.Fatalf("memoised StateOf of objects renamed in place differs:\n got %+v\nwant %+v", got, want)
	}
}

// podsByName is st with each node's pods sorted by name, in new slices: StateOf takes their order
// from its list of pods, in no fixed order.
func podsByName(st RolloutState) RolloutState {
	st.Nodes = slices.Clone(st.Nodes)
	for i := range st.Nodes {
		if st.Nodes[i].Pods != nil {
			st.Nodes[i].Pods = slices.SortedFunc(slices.Values(st.Nodes[i].Pods), func(a, b PodState) int { return strings.Compare(a.Name+a.UID, b.Name+b.UID) })
		}
	}
	return st
}

// TestMemoAppliedIsStateOf holds applied, the memo told what changed, to StateOf: over random
// sequences of pod writes and deletions and of the controller's own deletions, each named to
// applied, mixed with node, template and topology-key changes, which go through StateOf, every
// state equals StateOf of the same objects.
func TestMemoAppliedIsStateOf(t *testing.T) {
	applied := 0
	for seed := range uint64(40) {
		c := newMemoCluster(seed, 12)
		var m Memo
		now := t0
		o := c.observed(now)
		m.StateOf(o)
		for step := range 60 {
			pods, nodes, ds, topo := slices.Clone(c.pods), slices.Clone(c.nodes), c.ds, c.topo
			done := c.change(now)
			now = now.Add(time.Second)
			var got RolloutState
			if slices.Equal(nodes, c.nodes) && ds == c.ds && topo == c.topo {
				o.Now, o.Pods = now, c.pods
				var written []*corev1.Pod
				var gone []string
				for _, p := range c.pods {
					if !slices.Contains(pods, p) {
						written = append(written, p)
					}
				}
				for _, p := range pods {
					if !slices.ContainsFunc(c.pods, func(q *corev1.Pod) bool { return q.Name == p.Name }) {
						gone = append(gone, p.Name)
					}
				}
				var ok bool
				if got, ok = m.applied(o, written, gone); !ok {
					t.Fatalf("seed %d, step %d: applied refused the last call's DaemonSet", seed, step)
				}
				applied++
			} else {
				o = c.observed(now)
				got = m.StateOf(o)
			}
			if got, want := podsByName(got), podsByName(StateOf(o)); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, step %d, after %s: the memo's state differs:\n got %+v\nwant %+v", seed, step, done, got, want)
			}
		}
	}
	if applied < 1000 {
		t.Fatalf("applied ran %d times: the test does not test it", applied)
	}
	var m Memo
	o := newMemoCluster(1, 3).observed(t0)
	if _, ok := m.applied(o, nil, nil); ok {
		t.Error("applied on an empty memo must ask for StateOf")
	}
	m.StateOf(o)
	o.DaemonSet = o.DaemonSet.DeepCopy()
	if _, ok := m.applied(o, nil, nil); ok {
		t.Error("applied on another DaemonSet object must ask for StateOf")
	}
}

// changeNodes makes one random change to the nodes that moves a node in the rollout order (a node
// joins or leaves, becomes a control-plane node or a worker, moves zone), or one of change's.
func (c *memoCluster) changeNodes(now time.Time) string {
	i := c.rng.IntN(len(c.nodes))
	node := func() *corev1.Node { return c.writeNode(i) }
	switch c.rng.IntN(6) {
	case 0:
		c.created++
		name := fmt.Sprintf("node-%d-joined", c.created)
		c.nodes = append(c.nodes, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name), ResourceVersion: c.nextRV(),
				Labels: map[string]string{"zone": fmt.Sprintf("z%d", c.rng.IntN(4)), "pool": "a"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		})
		c.addPod(name)
		return "a node joined"
	case 1:
		if len(c.nodes) > 1 {
			c.nodes = slices.Delete(c.nodes, i, i+1)
		}
		return "a node left"
	case 2:
		n := node()
		if _, ok := n.Labels["node-role.kubernetes.io/control-plane"]; ok {
			delete(n.Labels, "node-role.kubernetes.io/control-plane")
		} else {
			n.Labels["node-role.kubernetes.io/control-plane"] = ""
		}
		return "a node's control-plane role flipped"
	case 3:
		n := node()
		if c.rng.IntN(4) == 0 {
			delete(n.Labels, "zone")
		} else {
			n.Labels["zone"] = fmt.Sprintf("z%d", c.rng.IntN(4))
		}
		return "a node moved zone"
	}
	return c.change(now)
}

// TestMemoKeepsRolloutOrder holds the memo's rollout order, repaired node by node, to a full
// sort: over random sequences of nodes joining and leaving, becoming control-plane nodes or
// workers, moving zone, becoming eligible or not and reachable or not, with pod, template and
// topology-key changes between them, the memo's Nodes are the same nodes fully sorted, and the
// plan made on them is the plan made on them shuffled (which Compute sorts itself).
func TestMemoKeepsRolloutOrder(t *testing.T) {
	for seed := range uint64(60) {
		c := newMemoCluster(seed, 16)
		c.topo = "zone"
		var m Memo
		c.steps(80, 4, time.Minute, c.changeNodes, func(step int, done []string, o Observed) {
			settings, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationMaxUnavailable: "2"})
			if err != nil {
				t.Fatal(err)
			}
			settings.TopologyKey = c.topo
			o.Settings = settings
			got := podsByName(m.StateOf(o))
			sorted := podsByName(StateOf(o))
			c.rng.Shuffle(len(sorted.Nodes), func(i, j int) { sorted.Nodes[i], sorted.Nodes[j] = sorted.Nodes[j], sorted.Nodes[i] })
			shuffled := sorted
			shuffled.Nodes = slices.Clone(sorted.Nodes)
			slices.SortFunc(sorted.Nodes, func(a, b NodeState) int { return rolloutCompare(&a, &b) })
			if !reflect.DeepEqual(got, sorted) {
				t.Fatalf("seed %d, step %d, after %v: the memo's nodes are not the full sort's:\n got %v\nwant %v", seed, step, done, names(got), names(sorted))
			}
			if gotPlan, wantPlan := Compute(got), Compute(shuffled); !reflect.DeepEqual(gotPlan, wantPlan) {
				t.Fatalf("seed %d, step %d, after %v: the plan on nodes in order differs from the plan on them shuffled:\n got %+v\nwant %+v", seed, step, done, gotPlan, wantPlan)
			}
			checkMemoSize(t, &m, o, fmt.Sprintf("seed %d, step %d", seed, step))
		})
	}
}

func names(st RolloutState) []string {
	var out []string
	for _, n := range st.Nodes {
		out = append(out, fmt.Sprintf("%s/%v/%s", n.Domain, n.ControlPlane, n.Name))
	}
	return out
}

// TestMemoComputeIsCompute holds Compute and DueAnalysis of a memo, which plan on the memo's own
// Nodes, to the same on a copy: over random sequences of pod, node, template and topology-key
// changes, a memo called through StateOf, Compute and DueAnalysis in random turns answers what
// the planner answers on the state of a second memo called through StateOf alone (the same
// calls, so the same order of each node's pods), a status fed back from plan to plan as the
// controller does; and no plan, request or state it returned changes with the calls after it.
func TestMemoComputeIsCompute(t *testing.T) {
	settings, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationMaxUnavailable: "2",
		rolloutapi.AnnotationAnalysis: `- {name: errors, query: 'x{node=~"{{ nodes }}"}', max: 0.1, interval: 20s, count: 2}`})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for seed := range uint64(40) {
		c := newMemoCluster(seed, 16)
		var lent, copied Memo
		var status rolloutapi.Status
		type kept struct {
			what      string
			got, want any
		}
		var earlier []kept
		// Half the rounds change nothing but what the plans deleted, so that waves settle and
		// their analysis falls due.
		change := func(now time.Time) string {
			if c.rng.IntN(2) == 0 {
				return "nothing"
			}
			return c.changeNodes(now)
		}
		c.steps(80, 2, 10*time.Second, change, func(step int, done []string, o Observed) {
			o.Settings, o.Status = settings, status
			o.Settings.TopologyKey = c.topo
			at := fmt.Sprintf("seed %d, step %d, after %v", seed, step, done)
			want := copied.StateOf(o)
			switch c.rng.IntN(3) {
			case 0:
				got := lent.StateOf(o)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: StateOf differs:\n got %+v\nwant %+v", at, got, want)
				}
				calls["StateOf"]++
				earlier = append(earlier, kept{"state", got, deepCopyState(got)})
			case 1:
				got, wantReq := lent.DueAnalysis(o), DueAnalysis(want)
				if !reflect.DeepEqual(got, wantReq) {
					t.Fatalf("%s: DueAnalysis differs:\n got %+v\nwant %+v", at, got, wantReq)
				}
				if got != nil {
					calls["DueAnalysis due"]++
					earlier = append(earlier, kept{"request", got, deepCopyJSON(t, got)})
				}
				calls["DueAnalysis"]++
			}
			// Every step plans, as every reconcile does, after StateOf or DueAnalysis or alone.
			got, wantPlan := lent.Compute(o), Compute(want)
			if !reflect.DeepEqual(got, wantPlan) {
				t.Fatalf("%s: Compute differs:\n got %+v\nwant %+v", at, got, wantPlan)
			}
			calls["Compute"]++
			if len(got.Delete) > 0 {
				calls["Compute deleting"]++
			}
			earlier = append(earlier, kept{"plan", got, deepCopyJSON(t, got)})
			status = got.Status
			c.replace(got.Delete, o.Now)
			// The last few: a result that later calls change changes in the next call or two.
			earlier = earlier[max(0, len(earlier)-8):]
			for _, k := range earlier {
				if !reflect.DeepEqual(k.got, k.want) {
					t.Fatalf("%s: a %s returned earlier changed since:\n now %+v\n was %+v", at, k.what, k.got, k.want)
				}
			}
			checkMemoSize(t, &lent, o, at)
		})
	}
	for _, what := range []string{"StateOf", "DueAnalysis", "DueAnalysis due", "Compute deleting"} {
		if calls[what] < 20 {
			t.Errorf("%d calls of %s: the test does not test it (%v)", calls[what], what, calls)
		}
	}
}

// replace deletes the pods of refs and creates their replacements, at the new revision and Ready
// since now, as the DaemonSet controller and kubelets would.
func (c *memoCluster) replace(refs []PodRef, now time.Time) {
	for _, ref := range refs {
		i := slices.IndexFunc(c.pods, func(p *corev1.Pod) bool { return string(p.UID) == ref.UID })
		if i < 0 {
			continue
		}
		c.pods = slices.Delete(c.pods, i, i+1)
		c.addPod(ref.Node)
		p := c.pods[len(c.pods)-1]
		p.Labels[revisionLabel] = newRev
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now)}}
	}
}

// deepCopyState is st with Nodes and every node's Pods in new arrays.
func deepCopyState(st RolloutState) RolloutState {
	st.Nodes = slices.Clone(st.Nodes)
	for i := range st.Nodes {
		st.Nodes[i].Pods = slices.Clone(st.Nodes[i].Pods)
	}
	return st
}

// deepCopyJSON is a copy of v (a plan, a request) that shares no memory with it.
func deepCopyJSON[T any](t *testing.T, v T) T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMemoFollowIsStateOf holds Follow to its promise: over random sequences of pod and node
// writes and deletions, the controller's own deletions, template and topology-key changes, each
// round's changes named to Follow (with names that changed nothing among them, as event handlers
// name objects more than once), the state planned on the followed memo, through StateOf or lent
// to the planner once or twice, equals StateOf of every object; Follow refuses exactly when the
// template or topology key changed, and then a call that reads everything takes over.
func TestMemoFollowIsStateOf(t *testing.T) {
	followed, refused := 0, 0
	for seed := range uint64(40) {
		c := newMemoCluster(seed, 12)
		var m Memo
		now := t0
		m.StateOf(c.observed(now))
		for step := range 60 {
			pods, nodes, ds, topo := slices.Clone(c.pods), slices.Clone(c.nodes), c.ds, c.topo
			var done []string
			for range 1 + c.rng.IntN(3) {
				done = append(done, c.changeNodes(now))
			}
			now = now.Add(time.Second)
			at := fmt.Sprintf("seed %d, step %d, after %v", seed, step, done)
			o := c.observed(now)
			if c.rng.IntN(8) == 0 {
				m.StateOf(o) // a periodic full read, between follows
				continue
			}
			ch := changesOf(c.rng, pods, c.pods, nodes, c.nodes)
			fo := o
			fo.Pods, fo.Nodes, fo.Followed = nil, nil, true
			same := topo == c.topo && sameTemplate(&ds.Spec.Template.Spec, &c.ds.Spec.Template.Spec)
			if ok := m.Follow(fo, ch); ok != same {
				t.Fatalf("%s: Follow answered %v where the template and key were the same: %v", at, ok, same)
			} else if !ok {
				refused++
				m.StateOf(o)
				continue
			}
			followed++
			want := podsByName(StateOf(o))
			for turn := range 1 + c.rng.IntN(2) {
				var got RolloutState
				if c.rng.IntN(2) == 0 {
					got = m.StateOf(fo)
				} else {
					m.lend(fo, func(in RolloutState, _ *scratch) { got = deepCopyState(in) })
				}
				if got := podsByName(got); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s, turn %d: the followed memo's state differs:\n got %+v\nwant %+v", at, turn, got, want)
				}
			}
			checkMemoSize(t, &m, o, at)
		}
	}
	if followed < 1000 || refused < 20 {
		t.Fatalf("Follow accepted %d and refused %d: the test does not test it", followed, refused)
	}
}

// changesOf are the Changes from before to after: the objects written (new objects), the names
// gone, and some names that changed nothing (an unchanged object, a name that never was).
func changesOf(rng *rand.Rand, podsBefore, podsAfter []*corev1.Pod, nodesBefore, nodesAfter []*corev1.Node) Changes {
	var ch Changes
	ch.Pods, ch.GonePods = diffObjects(rng, podsBefore, podsAfter)
	ch.Nodes, ch.GoneNodes = diffObjects(rng, nodesBefore, nodesAfter)
	if rng.IntN(4) == 0 {
		ch.GonePods, ch.GoneNodes = append(ch.GonePods, "never-was"), append(ch.GoneNodes, "never-was")
	}
	return ch
}

// diffObjects are the objects of after not in before, with one in eight of the others, and the
// names of before not in after.
func diffObjects[T interface {
	comparable
	metav1.Object
}](rng *rand.Rand, before, after []T) (written []T, gone []string) {
	for _, o := range after {
		if !slices.Contains(before, o) || rng.IntN(8) == 0 {
			written = append(written, o)
		}
	}
	for _, o := range before {
		if !slices.ContainsFunc(after, func(q T) bool { return q.GetName() == o.GetName() }) {
			gone = append(gone, o.GetName())
		}
	}
	return written, gone
}

// TestMemoFollowRefusesAMemoNotWhole: Follow brings up to date only a memo that holds what a
// cache holds of the same DaemonSet.
func TestMemoFollowRefusesAMemoNotWhole(t *testing.T) {
	c := newMemoCluster(1, 3)
	o := c.observed(t0)
	fo := o
	fo.Pods, fo.Nodes, fo.Followed = nil, nil, true
	other := fo
	other.DaemonSet = c.ds.DeepCopy()
	other.DaemonSet.UID = "another-uid"
	for _, tc := range []struct {
		name   string
		before func(m *Memo)
		o      Observed
	}{
		{"an empty memo", func(*Memo) {}, fo},
		{"a memo of another DaemonSet under the same name", func(m *Memo) { m.StateOf(o) }, other},
		{"a memo told it must read", func(m *Memo) { m.StateOf(o); m.MustRead() }, fo},
		{"a memo a forecast changed", func(m *Memo) { m.StateOf(o); m.applied(o, nil, nil) }, fo},
		{"a memo emptied by two pods of a name", func(m *Memo) {
			twice := o
			twice.Pods = append(slices.Clone(o.Pods), o.Pods[0].DeepCopy())
			m.StateOf(twice)
		}, fo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m Memo
			tc.before(&m)
			if m.Follow(tc.o, Changes{}) {
				t.Fatal("Follow accepted")
			}
		})
	}
	var m Memo
	m.StateOf(o)
	if !m.Follow(fo, Changes{}) {
		t.Fatal("Follow refused the memo of the call before")
	}
	if (*Memo)(nil).Follow(fo, Changes{}) {
		t.Fatal("a nil memo followed")
	}
}
