package rollout

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// The tracker hands a reconcile the names marked for its DaemonSet since the last one, and
// answers "read everything" whenever what it holds may not be all that changed.
func TestChangesFollowWhatAReconcileMustRead(t *testing.T) {
	a, b := types.NamespacedName{Namespace: "mon", Name: "a"}, types.NamespacedName{Namespace: "mon", Name: "b"}
	type drained struct {
		pods, nodes []string
		ok          bool
	}
	for _, tc := range []struct {
		name     string
		interval time.Duration
		do       func(c *changes)
		at       time.Duration // after the arm
		uid      types.UID
		want     drained
	}{
		{name: "a DaemonSet not followed reads everything", do: func(c *changes) { c.markPod(a, "p") }, uid: "a-uid"},
		{name: "marks since the arm, each name once", do: func(c *changes) {
			c.arm(a, "a-uid", t0)
			c.markPod(a, "p1")
			c.markPod(a, "p1")
			c.markPod(a, "p2")
			c.markNode("n1")
			c.markNode("n1")
		}, uid: "a-uid", want: drained{[]string{"p1", "p2"}, []string{"n1"}, true}},
		{name: "marks before the arm are forgotten", do: func(c *changes) {
			c.arm(a, "a-uid", t0)
			c.markPod(a, "before")
			c.markNode("before")
			c.arm(a, "a-uid", t0)
			c.markPod(a, "after")
		}, uid: "a-uid", want: drained{[]string{"after"}, []string{}, true}},
		{name: "another DaemonSet's pods are not this one's; nodes are every one's", do: func(c *changes) {
			c.arm(a, "a-uid", t0)
			c.arm(b, "b-uid", t0)
			c.markPod(b, "pb")
			c.markNode("n")
		}, uid: "a-uid", want: drained{[]string{}, []string{"n"}, true}},
		{name: "a DaemonSet created again under the name reads everything", do: func(c *changes) {
			c.arm(a, "a-uid", t0)
			c.markPod(a, "p")
		}, uid: "a-new-uid"},
		{name: "a dropped DaemonSet reads everything, and marks after the drop are not kept", do: func(c *changes) {
			c.arm(a, "a-uid", t0)
			c.drop(a)
			c.markPod(a, "p")
		}, uid: "a-uid"},
		{name: "past the interval everything is read", interval: time.Minute, do: func(c *changes) {
			c.arm(a, "a-uid", t0)
		}, at: time.Minute, uid: "a-uid"},
		{name: "within the interval the marks are read", interval: time.Minute, do: func(c *changes) {
			c.arm(a, "a-uid", t0)
		}, at: time.Minute - time.Second, uid: "a-uid", want: drained{[]string{}, []string{}, true}},
		{name: "a negative interval never reads everything", interval: -1, do: func(c *changes) {
			c.arm(a, "a-uid", t0)
		}, at: 1000 * time.Hour, uid: "a-uid", want: drained{[]string{}, []string{}, true}},
		{name: "too many names read everything, and keep none", do: func(c *changes) {
			c.arm(a, "a-uid", t0)
			for i := range maxChangedNames + 1 {
				c.markPod(a, strconv.Itoa(i))
			}
			if n := len(c.byDS[a].pods); n > 0 {
				t.Errorf("%d names kept past the bound", n)
			}
		}, uid: "a-uid"},
		{name: "an arm after an overflow follows again", do: func(c *changes) {
			c.arm(a, "a-uid", t0)
			for i := range maxChangedNames + 1 {
				c.markNode(strconv.Itoa(i))
			}
			c.arm(a, "a-uid", t0)
			c.markNode("n")
		}, uid: "a-uid", want: drained{[]string{}, []string{"n"}, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChanges(tc.interval)
			tc.do(c)
			var got drained
			got.pods, got.nodes, got.ok = c.drain(a, tc.uid, t0.Add(tc.at))
			slices.Sort(got.pods)
			slices.Sort(got.nodes)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("drain = %+v, want %+v", got, tc.want)
			}
			if got.ok {
				if pods, nodes, ok := c.drain(a, tc.uid, t0.Add(tc.at)); !ok || len(pods)+len(nodes) > 0 {
					t.Fatalf("a second drain = %v %v %v, want nothing marked since the first", pods, nodes, ok)
				}
			}
		})
	}
}

// followCluster is a DaemonSet's pods and the nodes in informer indexers, changed as an API
// server and its informers change them: each write updates the indexer first, then its event
// reaches the handlers, at once or later (pending).
type followCluster struct {
	t                 *testing.T
	rng               *rand.Rand
	rv, created       int
	ds                *appsv1.DaemonSet
	pods, nodes       toolscache.Indexer
	podsOf, nodesOf   func(context.Context, client.Object) []reconcile.Request
	pending           [][]client.Object // the objects of an event whose handler has not run
	nodeNames, podsAt []string
}

func (c *followCluster) nextRV() string { c.rv++; return strconv.Itoa(c.rv) }

// write stores obj (nil deletes old) and queues its event with the old and new objects.
func (c *followCluster) write(store toolscache.Indexer, old, obj client.Object) {
	var err error
	switch {
	case obj == nil:
		err = store.Delete(old)
	case old == nil:
		err = store.Add(obj)
	default:
		err = store.Update(obj)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	var objs []client.Object
	for _, o := range []client.Object{old, obj} {
		if o != nil {
			objs = append(objs, o)
		}
	}
	c.pending = append(c.pending, objs)
}

// deliver runs the handlers of the pending events, all of them or some, in order.
func (c *followCluster) deliver(all bool) {
	n := len(c.pending)
	if !all {
		n = c.rng.IntN(n + 1)
	}
	for _, objs := range c.pending[:n] {
		for _, o := range objs {
			if _, ok := o.(*corev1.Node); ok {
				c.nodesOf(context.Background(), o)
			} else {
				c.podsOf(context.Background(), o)
			}
		}
	}
	c.pending = slices.Delete(c.pending, 0, n)
}

func (c *followCluster) randomPod() *corev1.Pod {
	objs := c.pods.List()
	if len(objs) == 0 {
		return nil
	}
	slices.SortFunc(objs, func(a, b any) int { return strings.Compare(a.(*corev1.Pod).Name, b.(*corev1.Pod).Name) })
	return objs[c.rng.IntN(len(objs))].(*corev1.Pod)
}

func (c *followCluster) randomNode() *corev1.Node {
	objs := c.nodes.List()
	slices.SortFunc(objs, func(a, b any) int { return strings.Compare(a.(*corev1.Node).Name, b.(*corev1.Node).Name) })
	return objs[c.rng.IntN(len(objs))].(*corev1.Node)
}

func (c *followCluster) addPod(node, rev string, uid types.UID) {
	c.created++
	name := fmt.Sprintf("agent-%d", c.created)
	c.write(c.pods, nil, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "mon", Name: name, UID: types.UID("uid-" + name),
		ResourceVersion: c.nextRV(), Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: rev}, CreationTimestamp: metav1.NewTime(t0),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: uid, Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}}}})
}

func (c *followCluster) addNode() {
	c.created++
	name := fmt.Sprintf("node-%d", c.created)
	c.write(c.nodes, nil, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: c.nextRV(),
		Labels: map[string]string{"zone": fmt.Sprintf("z%d", c.rng.IntN(3))}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
}

// change makes one random write, or changes the DaemonSet, and names it.
func (c *followCluster) change(now time.Time) string {
	pod := func() (*corev1.Pod, *corev1.Pod) {
		old := c.randomPod()
		if old == nil {
			return nil, nil
		}
		p := old.DeepCopy()
		p.ResourceVersion = c.nextRV()
		return old, p
	}
	node := func() (*corev1.Node, *corev1.Node) {
		old := c.randomNode()
		n := old.DeepCopy()
		n.ResourceVersion = c.nextRV()
		return old, n
	}
	k := c.rng.IntN(40)
	if k > 12 {
		k %= 10 // the DaemonSet changes less often than its pods and the nodes
	}
	switch k {
	case 0:
		if old, p := pod(); p != nil {
			st := &p.Status.Conditions[0].Status
			*st = map[corev1.ConditionStatus]corev1.ConditionStatus{corev1.ConditionTrue: corev1.ConditionFalse, corev1.ConditionFalse: corev1.ConditionTrue}[*st]
			p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now)
			c.write(c.pods, old, p)
		}
		return "a pod's readiness flipped"
	case 1:
		if old, p := pod(); p != nil {
			p.DeletionTimestamp = &metav1.Time{Time: now}
			c.write(c.pods, old, p)
		}
		return "a pod started terminating"
	case 2:
		if old := c.randomPod(); old != nil {
			c.write(c.pods, old, nil)
		}
		return "a pod was deleted"
	case 3:
		// On a node without one: which of two live pods of a node counts is the order the
		// planner finds them in, which no informer fixes either.
		if n := c.randomNode(); !slices.ContainsFunc(c.pods.List(), func(o any) bool { return o.(*corev1.Pod).Spec.NodeName == n.Name }) {
			c.addPod(n.Name, []string{oldRev, newRev}[c.rng.IntN(2)], c.ds.UID)
		}
		return "a pod was created"
	case 4:
		if old, p := pod(); p != nil {
			p.OwnerReferences = nil
			c.write(c.pods, old, p)
		}
		return "a pod was orphaned"
	case 5:
		c.addPod(c.randomNode().Name, newRev, "another-uid")
		return "another DaemonSet's pod was created"
	case 6:
		old, n := node()
		n.Labels["zone"] = fmt.Sprintf("z%d", c.rng.IntN(3))
		c.write(c.nodes, old, n)
		return "a node moved zone"
	case 7:
		old, n := node()
		if len(n.Spec.Taints) > 0 {
			n.Spec.Taints = nil
		} else {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}}
		}
		c.write(c.nodes, old, n)
		return "a node became unreachable or reachable"
	case 8:
		if len(c.nodes.List()) > 2 {
			c.write(c.nodes, c.randomNode(), nil)
		}
		return "a node left"
	case 9:
		c.addNode()
		return "a node joined"
	case 10:
		ds := c.ds.DeepCopy()
		if ds.Spec.Template.Spec.NodeSelector == nil {
			ds.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "z1"}
		} else {
			ds.Spec.Template.Spec.NodeSelector = nil
		}
		c.ds = ds
		return "the template changed"
	case 11:
		ds := c.ds.DeepCopy()
		if ds.Annotations[rolloutapi.AnnotationTopologyKey] == "" {
			ds.Annotations[rolloutapi.AnnotationTopologyKey] = "zone"
		} else {
			delete(ds.Annotations, rolloutapi.AnnotationTopologyKey)
		}
		c.ds = ds
		return "the topology key changed"
	case 12:
		ds := c.ds.DeepCopy()
		ds.Status.ObservedGeneration = map[int64]int64{ds.Generation: ds.Generation - 1, ds.Generation - 1: ds.Generation}[ds.Status.ObservedGeneration]
		c.ds = ds
		return "the DaemonSet controller observed the generation, or not yet"
	}
	panic("unreachable")
}

// A reconcile that follows its informers' events decides what one that reads every pod and node
// decides: over random writes to pods and nodes (pods orphaned, another DaemonSet's pods, nodes
// joining and leaving), template, topology-key and generation changes, and the pods the plans
// delete deleted and replaced (at once, after the next reconcile, or never, as if the deletion
// were lost), with some
// events' handlers running only after the next reconcile
// (as an informer's handlers lag its store), the two decide the same once every handler ran. The
// follower reads everything only when it must (a negative interval), so a lost change shows.
func TestFollowingReconcilerDecidesAsAScanningOne(t *testing.T) {
	decisions, followed := 0, 0
	for seed := range uint64(30) {
		c, follower, scanner, clk := newFollowPair(t, seed)
		ds, rng := c.ds, c.rng
		var unseen []string // pods deleted that the cache still shows, for one reconcile more
		for step := range 80 {
			var done []string
			for range 1 + rng.IntN(3) {
				done = append(done, c.change(clk.Now()))
			}
			lagging := rng.IntN(4) == 0
			c.deliver(!lagging)
			clk.SetTime(clk.Now().Add(5 * time.Second))
			got, facts := c.reconcile(follower)
			want, _ := c.reconcile(scanner)
			if facts.Followed {
				followed++
				k := follower.kept[client.ObjectKeyFromObject(ds)]
				if slices.ContainsFunc(k.pods[:cap(k.pods)], func(p *corev1.Pod) bool { return p != nil }) ||
					slices.ContainsFunc(k.nodes[:cap(k.nodes)], func(n *corev1.Node) bool { return n != nil }) {
					t.Fatalf("seed %d, step %d: a reconcile that followed holds on to the objects of the last read", seed, step)
				}
			}
			if _, ok := follower.changes.byDS[client.ObjectKeyFromObject(ds)]; ok && facts.TargetRevision == "" {
				t.Fatalf("seed %d, step %d: a reconcile that read nothing still follows its DaemonSet", seed, step)
			}
			if lagging {
				continue // the follower may plan on what its handlers told it so far
			}
			decisions++
			if normalise(got); !reflect.DeepEqual(got, normalise(want)) {
				t.Fatalf("seed %d, step %d, after %v (followed %v): the follower decided\n%+v\nthe scanner\n%+v", seed, step, done, facts.Followed, got.Plan, want.Plan)
			}
			for k, v := range want.Annotations {
				ds := c.ds.DeepCopy()
				if v == nil {
					delete(ds.Annotations, k)
				} else {
					ds.Annotations[k] = *v
				}
				c.ds = ds
			}
			for _, name := range unseen {
				c.replace(name)
			}
			unseen = unseen[:0]
			if want.Plan != nil && len(want.Plan.Delete) > 0 && rng.IntN(2) == 0 {
				gone := make([]bool, len(want.Plan.Delete))
				for i, ref := range want.Plan.Delete {
					gone[i] = true
					switch rng.IntN(8) {
					case 0: // lost: the cache shows it running after its deletion is forgotten
					case 1, 2, 3:
						unseen = append(unseen, ref.Name)
					default:
						c.replace(ref.Name)
					}
				}
				follower.remember(want.Plan.Delete, gone, clk.Now())
				scanner.remember(want.Plan.Delete, gone, clk.Now())
			}
			follower.forgetSettled(clk.Now())
			scanner.forgetSettled(clk.Now())
		}
	}
	t.Logf("%d decisions compared, %d reconciles followed", decisions, followed)
	if decisions < 1500 || followed < 700 {
		t.Fatalf("%d decisions compared, %d reconciles followed: the test does not test it", decisions, followed)
	}
}

// replace deletes the pod name, if it is still there, and creates its replacement at the new
// revision, as the DaemonSet controller would.
func (c *followCluster) replace(name string) {
	if obj, ok, _ := c.pods.GetByKey("mon/" + name); ok {
		p := obj.(*corev1.Pod)
		c.write(c.pods, p, nil)
		c.addPod(p.Spec.NodeName, newRev, c.ds.UID)
	}
}

// newFollowPair is a followCluster of 8 nodes, each with a pod of the old revision, every event
// delivered, and two Reconcilers reading it: one that follows its events (the cluster's
// handlers mark for it) and reads everything only when it must, and one that reads everything
// on each reconcile and plans without a memo.
func newFollowPair(t *testing.T, seed uint64) (c *followCluster, follower, scanner *Reconciler, clk *clocktesting.FakePassiveClock) {
	t.Helper()
	ds := managedAgent("ds-uid", "agent:2")
	ds.Annotations[rolloutapi.AnnotationMaxUnavailable] = "2"
	revisions := revisionIndexer(t, ds.UID)
	store := indexedStore()
	c = &followCluster{t: t, rng: rand.New(rand.NewPCG(seed, seed)), ds: ds, pods: store.pods, nodes: store.nodes}
	clk = clocktesting.NewFakePassiveClock(t0)
	follower = &Reconciler{Client: indexerClient{revisions: revisions}, Store: store, Clock: clk, changes: newChanges(-1)}
	scanner = &Reconciler{Client: indexerClient{revisions: revisions}, Store: store, Clock: clk}
	c.podsOf = follower.changes.podsOf(controllingDaemonSet)
	c.nodesOf = follower.changes.nodesOf(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(ds)}}
	})
	for range 8 {
		c.addNode()
	}
	for _, obj := range c.nodes.List() {
		c.addPod(obj.(*corev1.Node).Name, oldRev, ds.UID)
	}
	c.deliver(true)
	return c, follower, scanner, clk
}

// reconcile gathers and decides as r's reconcile of the cluster's DaemonSet would (apply aside).
func (c *followCluster) reconcile(r *Reconciler) (Decision, Facts) {
	c.t.Helper()
	f, err := r.gather(context.Background(), logr.Discard(), c.ds.DeepCopy())
	if err != nil {
		c.t.Fatal(err)
	}
	if r.changes == nil {
		f.Memo = nil // the scanner plans on StateOf of what it read, without a memo
	}
	return decide(f), f
}

// A reconcile that stops after it dropped what it was told, to read everything, and before its
// memo took the read, leaves a memo that reads everything next time: the change it was told of
// is not lost.
func TestAReconcileStoppedBeforeItsPlanLosesNoChange(t *testing.T) {
	c, follower, scanner, clk := newFollowPair(t, 1)
	c.reconcile(follower)
	old := c.randomPod()
	p := old.DeepCopy()
	p.ResourceVersion = c.nextRV()
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	c.write(c.pods, old, p)
	c.deliver(true)
	template := c.ds
	c.ds = c.ds.DeepCopy()
	c.ds.Spec.Template.Spec.NodeSelector = map[string]string{"zone": "z1"}
	// Told of the pod, refused by the memo (a new template), read everything: and stopped there.
	if _, err := follower.gather(context.Background(), logr.Discard(), c.ds.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	c.ds = template
	clk.SetTime(clk.Now().Add(time.Second))
	got, f := c.reconcile(follower)
	want, _ := c.reconcile(scanner)
	if f.Followed {
		t.Error("the reconcile after a stopped one followed a memo that missed a change")
	}
	if !reflect.DeepEqual(normalise(got), normalise(want)) {
		t.Fatalf("the follower decided\n%+v\nthe scanner\n%+v", got.Plan, want.Plan)
	}
}

// normalise sorts what a plan names in no fixed order (a node's pods come in the order the memo
// took them).
func normalise(d Decision) Decision {
	if d.Plan != nil {
		slices.SortFunc(d.Plan.Delete, func(a, b rolloutplan.PodRef) int { return strings.Compare(a.Name, b.Name) })
	}
	return d
}
