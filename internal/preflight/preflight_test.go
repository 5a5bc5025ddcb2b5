package preflight

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	schedulinghelpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

const controlPlaneTaint = "node-role.kubernetes.io/control-plane"

type nodeOpt func(*corev1.Node)

func mkNode(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func label(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }
func taint(k string, e corev1.TaintEffect) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Effect: e}) }
}
func controlPlane(n *corev1.Node) {
	n.Labels[controlPlaneTaint] = ""
	taint(controlPlaneTaint, corev1.TaintEffectNoSchedule)(n)
}
func allocatable(cpu string, pods int) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(cpu)
		n.Status.Allocatable[corev1.ResourcePods] = *resource.NewQuantity(int64(pods), resource.DecimalSI)
	}
}

func daemonSet(mutate ...func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent", UID: "ds-uid"},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}},
		}}},
	}
	for _, m := range mutate {
		m(ds)
	}
	return ds
}

func tolerate(key string) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Tolerations = append(ds.Spec.Template.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}
}
func image(img string) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = img }
}
func selector(k, v string) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.NodeSelector = map[string]string{k: v} }
}
func onDelete(ds *appsv1.DaemonSet) {
	ds.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
}
func cpuRequest(q string) func(*appsv1.DaemonSet) {
	return func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
}

type podOpt func(*corev1.Pod)

func mkPod(ns, name, node string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func daemonPod(ds *appsv1.DaemonSet, rev string, readyAfter time.Duration) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: rev}
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(p.CreationTimestamp.Add(readyAfter))}}
	}
}
func requests(cpu string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
}
func prio(v int32) podOpt { return func(p *corev1.Pod) { p.Spec.Priority = &v } }
func started(at time.Time) podOpt {
	return func(p *corev1.Pod) { p.Status.StartTime = &metav1.Time{Time: at} }
}
func hostPortOn(ip string, port int32, proto corev1.Protocol) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{HostIP: ip, HostPort: port, ContainerPort: port, Protocol: proto})
	}
}

// cluster is three workers in two zones and a tainted control-plane node; the live DaemonSet runs
// revision "old" on the workers.
func cluster(live *appsv1.DaemonSet) ([]*corev1.Node, []*corev1.Pod) {
	nodes := []*corev1.Node{
		mkNode("cp-0", controlPlane),
		mkNode("worker-a1", label("zone", "a")),
		mkNode("worker-a2", label("zone", "a")),
		mkNode("worker-b1", label("zone", "b")),
	}
	var pods []*corev1.Pod
	for _, n := range nodes[1:] {
		pods = append(pods, mkPod("default", "agent-"+n.Name, n.Name, daemonPod(live, "old", 10*time.Second)))
	}
	return nodes, pods
}

func changes(p Impact) map[string]string {
	out := map[string]string{}
	for _, n := range p.Nodes {
		out[n.Node] = string(n.Change)
	}
	return out
}

func TestBuildNodeChanges(t *testing.T) {
	live := daemonSet()
	cases := []struct {
		name        string
		live        *appsv1.DaemonSet // nil: create
		after       *appsv1.DaemonSet
		nodeOpts    map[string][]nodeOpt
		want        map[string]string
		wantReasons map[string]string // substring of the node's reason
		newRevision bool
	}{
		{
			name: "create", after: daemonSet(),
			want:        map[string]string{"cp-0": "none", "worker-a1": "gains", "worker-a2": "gains", "worker-b1": "gains"},
			newRevision: true,
		},
		{
			name: "image change replaces every pod", live: live, after: daemonSet(image("agent:2")), newRevision: true,
			want: map[string]string{"cp-0": "none", "worker-a1": "replaced", "worker-a2": "replaced", "worker-b1": "replaced"},
		},
		{
			name: "same template touches nothing", live: live, after: daemonSet(),
			want: map[string]string{"cp-0": "none", "worker-a1": "unchanged", "worker-a2": "unchanged", "worker-b1": "unchanged"},
		},
		{
			name: "a toleration lets the pod onto the control plane", live: live, after: daemonSet(tolerate(controlPlaneTaint)), newRevision: true,
			want:        map[string]string{"cp-0": "gains", "worker-a1": "replaced", "worker-a2": "replaced", "worker-b1": "replaced"},
			wantReasons: map[string]string{"cp-0": "no longer: taint node-role.kubernetes.io/control-plane:NoSchedule is not tolerated"},
		},
		{
			name: "a node selector takes the pod off the other zone", live: live, after: daemonSet(selector("zone", "a")), newRevision: true,
			want:        map[string]string{"cp-0": "none", "worker-a1": "replaced", "worker-a2": "replaced", "worker-b1": "loses"},
			wantReasons: map[string]string{"worker-b1": "nodeSelector zone=a does not match"},
		},
		{
			name: "an untolerated NoSchedule taint: the rolling update deletes the pod and creates none", live: live, after: daemonSet(image("agent:2")), newRevision: true,
			nodeOpts:    map[string][]nodeOpt{"worker-b1": {taint("dedicated", corev1.TaintEffectNoSchedule)}},
			want:        map[string]string{"cp-0": "none", "worker-a1": "replaced", "worker-a2": "replaced", "worker-b1": "loses"},
			wantReasons: map[string]string{"worker-b1": "taint dedicated:NoSchedule is not tolerated: the rolling update deletes"},
		},
		{
			name: "an untolerated NoSchedule taint under OnDelete: the old pod stays", live: daemonSet(onDelete), after: daemonSet(onDelete, image("agent:2")), newRevision: true,
			nodeOpts: map[string][]nodeOpt{"worker-b1": {taint("dedicated", corev1.TaintEffectNoSchedule)}},
			want:     map[string]string{"cp-0": "none", "worker-a1": "replaced", "worker-a2": "replaced", "worker-b1": "keeps"},
		},
		{
			name: "an untolerated NoSchedule taint without a new revision leaves the pod", live: live, after: daemonSet(),
			nodeOpts: map[string][]nodeOpt{"worker-b1": {taint("dedicated", corev1.TaintEffectNoSchedule)}},
			want:     map[string]string{"cp-0": "none", "worker-a1": "unchanged", "worker-a2": "unchanged", "worker-b1": "keeps"},
		},
		{
			name: "an untolerated NoExecute taint evicts", live: live, after: daemonSet(image("agent:2")), newRevision: true,
			nodeOpts:    map[string][]nodeOpt{"worker-b1": {taint("dedicated", corev1.TaintEffectNoExecute)}},
			want:        map[string]string{"cp-0": "none", "worker-a1": "replaced", "worker-a2": "replaced", "worker-b1": "loses"},
			wantReasons: map[string]string{"worker-b1": "taint dedicated:NoExecute is not tolerated"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nodes, pods := cluster(live)
			for _, n := range nodes {
				for _, o := range tc.nodeOpts[n.Name] {
					o(n)
				}
			}
			in := Snapshot{After: tc.after, Live: tc.live, NewRevision: tc.newRevision, Nodes: nodes, Pods: pods, Now: t0}
			if tc.live != nil {
				in.DaemonPods = pods
			} else {
				in.Pods = nil
			}
			p := Assess(in)
			if got := changes(p); !mapsEqual(got, tc.want) {
				t.Fatalf("changes = %v, want %v", got, tc.want)
			}
			for node, want := range tc.wantReasons {
				for _, n := range p.Nodes {
					if n.Node == node && !strings.Contains(n.Reason, want) {
						t.Errorf("%s: reason %q does not contain %q", node, n.Reason, want)
					}
				}
			}
			if p.NewRevision != (tc.newRevision || tc.live == nil) {
				t.Errorf("NewRevision = %v", p.NewRevision)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestTemplateChangesNameTheFields(t *testing.T) {
	live := daemonSet()
	after := daemonSet(image("agent:2"), tolerate("x"))
	got := templateChanges(&live.Spec.Template, &after.Spec.Template)
	want := []string{"spec.template.spec.containers[0].image", "spec.template.spec.tolerations"}
	if !slices.Equal(got, want) {
		t.Fatalf("templateChanges = %v, want %v", got, want)
	}
}

func TestFit(t *testing.T) {
	newPod := func(cpu string, priority int32, opts ...podOpt) *corev1.Pod {
		p := mkPod("default", "new", "", append([]podOpt{requests(cpu), prio(priority)}, opts...)...)
		return p
	}
	node := mkNode("n", allocatable("4", 10))
	cases := []struct {
		name         string
		pod          *corev1.Pod
		node         *corev1.Node
		others       []*corev1.Pod
		schedulable  bool
		insufficient string
		conflict     string
		victims      []string
	}{
		{name: "fits", pod: newPod("1", 0), others: []*corev1.Pod{mkPod("x", "a", "n", requests("3"))}, schedulable: true},
		{
			name: "does not fit and cannot preempt an equal priority", pod: newPod("2", 0),
			others:       []*corev1.Pod{mkPod("x", "a", "n", requests("3"))},
			insufficient: "cpu: asks 2, 1 free of 4",
		},
		{
			name: "preempts the least important lower-priority pods only", pod: newPod("1", 1000),
			others: []*corev1.Pod{
				mkPod("x", "high", "n", requests("2"), prio(2000)),
				mkPod("x", "early", "n", requests("1"), started(t0.Add(-time.Hour))),
				mkPod("x", "late", "n", requests("1"), started(t0)),
			},
			schedulable: true, insufficient: "cpu", victims: []string{"x/late"},
		},
		{
			name: "higher-priority victims are reprieved first", pod: newPod("1", 1000),
			others: []*corev1.Pod{
				mkPod("x", "mid", "n", requests("2"), prio(500)),
				mkPod("x", "low", "n", requests("2"), prio(100)),
			},
			schedulable: true, insufficient: "cpu", victims: []string{"x/low"},
		},
		{
			name: "cannot fit even without every lower-priority pod", pod: newPod("3", 1000),
			others:       []*corev1.Pod{mkPod("x", "high", "n", requests("2"), prio(2000)), mkPod("x", "low", "n", requests("1"))},
			insufficient: "cpu",
		},
		{
			name: "PreemptNever does not preempt", pod: newPod("1", 1000, func(p *corev1.Pod) { p.Spec.PreemptionPolicy = ptr.To(corev1.PreemptNever) }),
			others:       []*corev1.Pod{mkPod("x", "low", "n", requests("4"))},
			insufficient: "cpu",
		},
		{
			name: "pod count", pod: newPod("0", 0), node: mkNode("n", allocatable("4", 1)),
			others:       []*corev1.Pod{mkPod("x", "a", "n")},
			insufficient: "pods: 1 of 1 already run",
		},
		{
			name: "host port on every address collides with a specific one", pod: newPod("0", 0, hostPortOn("", 9100, "")),
			others:   []*corev1.Pod{mkPod("x", "holder", "n", hostPortOn("10.0.0.1", 9100, corev1.ProtocolTCP))},
			conflict: "x/holder holds host port TCP 10.0.0.1:9100",
		},
		{
			name: "host port on another protocol does not collide", pod: newPod("0", 0, hostPortOn("", 9100, corev1.ProtocolUDP)),
			others: []*corev1.Pod{mkPod("x", "holder", "n", hostPortOn("", 9100, ""))}, schedulable: true,
		},
		{
			name: "a host port is freed by preempting its lower-priority holder", pod: newPod("0", 10, hostPortOn("", 9100, "")),
			others:      []*corev1.Pod{mkPod("x", "holder", "n", hostPortOn("", 9100, ""))},
			schedulable: true, conflict: "x/holder", victims: []string{"x/holder"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := node
			if tc.node != nil {
				n = tc.node
			}
			r := Fit(tc.pod, n, tc.others)
			if r.Schedulable != tc.schedulable {
				t.Errorf("Schedulable = %v, want %v (%+v)", r.Schedulable, tc.schedulable, r)
			}
			if tc.insufficient != "" && !strings.Contains(strings.Join(r.Insufficient, "; "), tc.insufficient) {
				t.Errorf("Insufficient = %v, want %q", r.Insufficient, tc.insufficient)
			}
			if tc.insufficient == "" && len(r.Insufficient) > 0 {
				t.Errorf("Insufficient = %v, want none", r.Insufficient)
			}
			if tc.conflict != "" && !strings.Contains(strings.Join(r.HostPortConflicts, "; "), tc.conflict) {
				t.Errorf("HostPortConflicts = %v, want %q", r.HostPortConflicts, tc.conflict)
			}
			var victims []string
			for _, v := range r.Preempts {
				victims = append(victims, v.Namespace+"/"+v.Name)
			}
			if !slices.Equal(victims, tc.victims) {
				t.Errorf("victims = %v, want %v", victims, tc.victims)
			}
		})
	}
}

// TestFitVictimsProperties checks, on random nodes, what the scheduler's victim selection
// guarantees: victims have lower priority, the pod fits without them, and putting any one victim
// back makes it not fit (none is taken needlessly).
func TestFitVictimsProperties(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := range 2000 {
		node := mkNode("n", allocatable(fmt.Sprint(1+rng.Intn(8)), 3+rng.Intn(8)))
		var others []*corev1.Pod
		for j := range rng.Intn(8) {
			opts := []podOpt{requests(fmt.Sprintf("%dm", 250*rng.Intn(8))), prio(int32(rng.Intn(4) * 100)), started(t0.Add(time.Duration(rng.Intn(100)) * time.Second))}
			if rng.Intn(4) == 0 {
				opts = append(opts, hostPortOn("", 9100, ""))
			}
			others = append(others, mkPod("x", fmt.Sprint("p", j), "n", opts...))
		}
		podOpts := []podOpt{requests(fmt.Sprintf("%dm", 250*rng.Intn(12))), prio(int32(rng.Intn(4) * 100))}
		if rng.Intn(3) == 0 {
			podOpts = append(podOpts, hostPortOn("", 9100, ""))
		}
		pod := mkPod("default", "new", "", podOpts...)
		r := Fit(pod, node, others)
		victim := map[string]bool{}
		for _, v := range r.Preempts {
			victim[v.Name] = true
			if v.Priority >= schedulinghelpers.PodPriority(pod) {
				t.Fatalf("case %d: victim %s has priority %d, not below %d", i, v.Name, v.Priority, schedulinghelpers.PodPriority(pod))
			}
		}
		var kept []*corev1.Pod
		for _, p := range others {
			if !victim[p.Name] {
				kept = append(kept, p)
			}
		}
		in, c := fits(pod, node, kept)
		fitsNow := len(in) == 0 && len(c) == 0
		if r.Schedulable != fitsNow {
			t.Fatalf("case %d: Schedulable %v but fits without the victims: %v (%v %v)", i, r.Schedulable, fitsNow, in, c)
		}
		for _, p := range others {
			if !victim[p.Name] {
				continue
			}
			if in, c := fits(pod, node, append(append([]*corev1.Pod(nil), kept...), p)); len(in) == 0 && len(c) == 0 {
				t.Fatalf("case %d: victim %s could have stayed", i, p.Name)
			}
		}
	}
}

func TestBuildFitCountsTheReplacedPodAsGone(t *testing.T) {
	live := daemonSet(cpuRequest("2"))
	nodes := []*corev1.Node{mkNode("n", allocatable("4", 10))}
	own := mkPod("default", "agent-n", "n", daemonPod(live, "old", time.Second), requests("2"))
	filler := mkPod("x", "filler", "n", requests("1"))
	in := Snapshot{After: daemonSet(cpuRequest("3")), Live: live, NewRevision: true, Nodes: nodes, Pods: []*corev1.Pod{own, filler}, DaemonPods: []*corev1.Pod{own}, Now: t0}
	if p := Assess(in); p.Summary.NotFit != 0 {
		t.Fatalf("3 CPUs next to a 1-CPU filler on 4 must fit once the 2-CPU old pod is gone: %+v", p.Nodes[0].Fit)
	}
	in.After = daemonSet(cpuRequest("3"), func(ds *appsv1.DaemonSet) {
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxSurge: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
	})
	if p := Assess(in); p.Summary.NotFit != 1 {
		t.Fatalf("with maxSurge the old pod stays while the new one starts: %+v", p.Nodes[0].Fit)
	}
}

func TestRequestsDefaultToLimits(t *testing.T) {
	ds := daemonSet(func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5")}
	})
	in := Snapshot{After: ds, Nodes: []*corev1.Node{mkNode("n")}, Now: t0}
	p := Assess(in)
	if p.Summary.NotFit != 1 || !strings.Contains(strings.Join(p.Nodes[0].Fit.Insufficient, ""), "cpu: asks 5") {
		t.Fatalf("a 5-CPU limit without requests asks 5 CPUs: %+v", p.Nodes[0].Fit)
	}
}

func TestRollingUpdateWaves(t *testing.T) {
	live := daemonSet()
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range 8 {
		n := mkNode(fmt.Sprint("w", i))
		nodes = append(nodes, n)
		pods = append(pods, mkPod("default", "agent-"+n.Name, n.Name, daemonPod(live, "old", time.Duration(10+i)*time.Second)))
	}
	after := daemonSet(image("agent:2"), func(ds *appsv1.DaemonSet) {
		ds.Spec.MinReadySeconds = 5
		ds.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromString("25%"))}
	})
	ready, known := ReadyAfter(pods)
	if !known || ready != 14*time.Second {
		t.Fatalf("ReadyAfter = %v %v, want the median 14s", ready, known)
	}
	p := Assess(Snapshot{After: after, Live: live, NewRevision: true, Nodes: nodes, Pods: pods, DaemonPods: pods, ReadyAfter: ready, ReadyKnown: known, Now: t0})
	r := p.Rollout
	if r.Strategy != "RollingUpdate" || r.Batch != 2 || r.Waves != 4 || r.Estimate != 4*(14+5)*time.Second {
		t.Fatalf("rollout = %+v, want 4 waves of 2 taking 4×19s", r)
	}
}

func TestManagedRolloutFollowsTheController(t *testing.T) {
	managed := func(ds *appsv1.DaemonSet) {
		onDelete(ds)
		ds.Annotations = map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged, rolloutapi.AnnotationSteps: "1,pause:5m,100%", rolloutapi.AnnotationMaxUnavailable: "2"}
		tolerate(controlPlaneTaint)(ds)
	}
	live := daemonSet(managed)
	nodes, pods := cluster(live)
	cp := mkPod("default", "agent-cp-0", "cp-0", daemonPod(live, "old", 10*time.Second))
	pods = append(pods, cp)
	p := Assess(Snapshot{After: daemonSet(managed, image("agent:2")), Live: live, NewRevision: true, Nodes: nodes, Pods: pods, DaemonPods: pods, ReadyAfter: 10 * time.Second, ReadyKnown: true, Now: t0})
	f := p.Rollout.Managed
	if f == nil || !f.Complete {
		t.Fatalf("managed forecast = %+v, want a complete rollout", f)
	}
	var waves [][]string
	for _, w := range f.Waves {
		waves = append(waves, w.Nodes)
	}
	want := [][]string{{"worker-a1"}, {"worker-a2", "worker-b1"}, {"cp-0"}}
	if fmt.Sprint(waves) != fmt.Sprint(want) {
		t.Fatalf("waves = %v, want %v (canary first, control plane last)", waves, want)
	}
	if len(f.Pauses) != 1 || f.Pauses[0].Duration != 5*time.Minute {
		t.Fatalf("pauses = %+v, want one of 5m", f.Pauses)
	}
	// canary 10s, pause 5m, two nodes 10s, control plane 10s.
	if want := 10*time.Second + 5*time.Minute + 20*time.Second; f.Duration != want {
		t.Fatalf("duration = %v, want %v", f.Duration, want)
	}
}
