package demo

import (
	"bytes"
	"path/filepath"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/test/golden"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// node builds a test node; options add labels and taints.
func node(name string, opts ...func(*corev1.Node)) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{localcluster.ZoneLabel: "zone-a"}}}
	for _, o := range opts {
		o(&n)
	}
	return n
}

func withTaint(key string, effect corev1.TaintEffect) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: effect})
		n.Labels[key] = ""
	}
}

func withLabel(k, v string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels[k] = v }
}

func readyPod(name, nodeName string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func daemonSet(spec corev1.PodSpec) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent"},
		Spec:       appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}},
	}
}

func TestBuildReportExplainsEveryNode(t *testing.T) {
	cp := localcluster.ControlPlaneLabel
	tests := map[string]struct {
		spec       corev1.PodSpec // the DaemonSet's pod template
		node       corev1.Node
		pods       []corev1.Pod
		wantStatus string
		wantRole   string
	}{
		"a running ready pod is reported as such": {
			node:       node("w"),
			pods:       []corev1.Pod{readyPod("agent-1", "w")},
			wantStatus: "Running, ready",
			wantRole:   "worker",
		},
		"an untolerated NoSchedule taint is named": {
			node:       node("cp", withTaint(cp, corev1.TaintEffectNoSchedule)),
			wantStatus: "no pod: taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated by the pod template",
			wantRole:   "control-plane",
		},
		"the legacy master toleration does not cover the control-plane taint": {
			spec:       corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule}}},
			node:       node("cp", withTaint(cp, corev1.TaintEffectNoSchedule)),
			wantStatus: "no pod: taint node-role.kubernetes.io/control-plane:NoSchedule not tolerated by the pod template",
			wantRole:   "control-plane",
		},
		"a tolerated taint leaves the node eligible": {
			spec:       corev1.PodSpec{Tolerations: []corev1.Toleration{{Key: cp, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}},
			node:       node("cp", withTaint(cp, corev1.TaintEffectNoSchedule)),
			wantStatus: "no pod: eligible, pod not created yet",
			wantRole:   "control-plane",
		},
		"a PreferNoSchedule taint does not keep DaemonSet pods away": {
			node:       node("w", withTaint("soft", corev1.TaintEffectPreferNoSchedule)),
			wantStatus: "no pod: eligible, pod not created yet",
			wantRole:   "worker",
		},
		"a nodeSelector that does not match is named": {
			spec:       corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}},
			node:       node("w", withLabel("disk", "hdd")),
			wantStatus: "no pod: excluded by the template's nodeSelector or node affinity",
			wantRole:   "worker",
		},
		"a terminating pod does not count as the node's pod": {
			node: node("w"),
			pods: func() []corev1.Pod {
				p := readyPod("agent-old", "w")
				p.DeletionTimestamp = &metav1.Time{}
				return []corev1.Pod{p}
			}(),
			wantStatus: "no pod: eligible, pod not created yet",
			wantRole:   "worker",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := BuildReport(daemonSet(tc.spec), []corev1.Node{tc.node}, tc.pods)
			if len(r.Placements) != 1 {
				t.Fatalf("got %d placements, want 1", len(r.Placements))
			}
			got := r.Placements[0]
			if got.Status != tc.wantStatus || got.Role != tc.wantRole {
				t.Errorf("got status %q role %q, want %q %q", got.Status, got.Role, tc.wantStatus, tc.wantRole)
			}
			wantRunning := 0
			if tc.wantStatus == "Running, ready" {
				wantRunning = 1
			}
			if r.Running != wantRunning {
				t.Errorf("Running = %d, want %d", r.Running, wantRunning)
			}
		})
	}
}

func TestRenderMatchesGolden(t *testing.T) {
	ds := daemonSet(corev1.PodSpec{})
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, CurrentNumberScheduled: 2, NumberReady: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}
	nodes := []corev1.Node{
		node("worker-1", withLabel(localcluster.ZoneLabel, "zone-b")),
		node("control-plane-0", withTaint(localcluster.ControlPlaneLabel, corev1.TaintEffectNoSchedule)),
		node("worker-0"),
	}
	pods := []corev1.Pod{readyPod("agent-a", "worker-0"), readyPod("agent-b", "worker-1")}
	var buf bytes.Buffer
	if err := Render(&buf, []DaemonSetReport{BuildReport(ds, nodes, pods)}); err != nil {
		t.Fatal(err)
	}
	golden.Assert(t, filepath.Join("testdata", "render.golden"), buf.Bytes())
}
