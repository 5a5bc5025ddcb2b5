package rolloutplan

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/nodes"
)

// daemonPod is a pod as the DaemonSet controller creates it and a kubelet reports it: pinned to
// node by affinity, bound there, and Ready with every condition a kubelet writes.
func daemonPod(node string) *corev1.Pod {
	at := metav1.NewTime(t0)
	var conds []corev1.PodCondition
	for _, c := range []corev1.PodConditionType{"PodReadyToStartContainers", corev1.PodInitialized, corev1.PodReady, corev1.ContainersReady, corev1.PodScheduled} {
		conds = append(conds, corev1.PodCondition{Type: c, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(time.Duration(len(conds)) * time.Second)), Reason: "r", Message: "m"})
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "agent-x7k2p", GenerateName: "agent-", Namespace: "platform", UID: "pod-uid", CreationTimestamp: at,
			Labels:          map[string]string{"app": "agent", revisionLabel: oldRev, "pod-template-generation": "2"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/default-container": "agent"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}},
			}}},
			Containers:  []corev1.Container{{Name: "agent", Image: "agent:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, Conditions: conds, PodIP: "10.0.0.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", Ready: true, Image: "agent:1", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}}},
		},
	}
}

// TestStripPodKeepsWhatThePlannerReads holds StripPod, the controller's pod cache transform, to
// its one promise: what the planner reads of a stripped pod (its state, its node, its controller)
// is what it reads of the whole pod, whatever the pod's state.
func TestStripPodKeepsWhatThePlannerReads(t *testing.T) {
	deletedAt := metav1.NewTime(t0.Add(time.Minute))
	for name, change := range map[string]func(p *corev1.Pod){
		"ready and bound": func(*corev1.Pod) {},
		"pinned, not yet bound": func(p *corev1.Pod) {
			p.Spec.NodeName = ""
			p.Status = corev1.PodStatus{Phase: corev1.PodPending}
		},
		"not ready since a transition": func(p *corev1.Pod) {
			for i := range p.Status.Conditions {
				p.Status.Conditions[i].Status = corev1.ConditionFalse
			}
		},
		"terminating": func(p *corev1.Pod) { p.DeletionTimestamp = &deletedAt },
		"deleted by the controller, not yet seen terminating": func(p *corev1.Pod) { p.UID = "deleted-uid" },
		"a container that cannot pull its image": func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "back-off pulling agent:2"}}
		},
		"an init container crash-looping": func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "init", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}}
		},
		"a container waiting for a reason that fixes itself": func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}
		},
		"no conditions yet": func(p *corev1.Pod) { p.Status.Conditions = nil },
	} {
		t.Run(name, func(t *testing.T) {
			full := daemonPod("node-1")
			change(full)
			obj, err := StripPod(full.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			slim := obj.(*corev1.Pod)
			deleted := map[types.UID]time.Time{"deleted-uid": t0.Add(2 * time.Minute)}
			if got, want := podState(slim, deleted), podState(full, deleted); got != want {
				t.Errorf("planner's state of the stripped pod %+v, of the pod %+v", got, want)
			}
			if got, want := nodes.OfPod(slim), nodes.OfPod(full); got != want || want == "" {
				t.Errorf("node of the stripped pod %q, of the pod %q", got, want)
			}
			if got, want := metav1.GetControllerOfNoCopy(slim), metav1.GetControllerOfNoCopy(full); !reflect.DeepEqual(got, want) {
				t.Errorf("controller of the stripped pod %+v, of the pod %+v", got, want)
			}
			if slim.Name != full.Name || slim.Namespace != full.Namespace || slim.UID != full.UID {
				t.Errorf("stripped pod is %s/%s (%s), want %s/%s (%s)", slim.Namespace, slim.Name, slim.UID, full.Namespace, full.Name, full.UID)
			}
		})
	}
}

// TestStripPodDropsWhatNoOneReads: the cache holds every DaemonSet pod of the cluster, so what a
// stripped pod keeps beyond the planner's needs is memory paid per pod.
func TestStripPodDropsWhatNoOneReads(t *testing.T) {
	obj, err := StripPod(daemonPod("node-1"))
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*corev1.Pod)
	if p.ManagedFields != nil || p.Annotations != nil || p.GenerateName != "" || len(p.Labels) != 1 {
		t.Errorf("metadata kept beyond the revision label: %+v", p.ObjectMeta)
	}
	if p.Spec.Affinity != nil || len(p.Spec.Containers) != 0 || len(p.Spec.Tolerations) != 0 {
		t.Errorf("a bound pod keeps more spec than its node: %+v", p.Spec)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Type != corev1.PodReady || p.Status.Conditions[0].Message != "" ||
		p.Status.Phase != "" || p.Status.PodIP != "" || len(p.Status.ContainerStatuses) != 0 {
		t.Errorf("status kept beyond the Ready condition: %+v", p.Status)
	}
	if _, err := StripPod(&corev1.Node{}); err != nil {
		t.Errorf("a node passes through: %v", err)
	}
}

func TestEligibleKeepsNodesTheDaemonSetControllerKeepsRunningOn(t *testing.T) {
	unreachable := corev1.Taint{Key: corev1.TaintNodeUnreachable, Effect: corev1.TaintEffectNoSchedule}
	notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
	dedicated := corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}
	spec := &corev1.PodSpec{NodeSelector: map[string]string{"pool": "a"}}
	tests := map[string]struct {
		labels map[string]string
		taints []corev1.Taint
		want   bool
	}{
		"selected and untainted":                          {labels: map[string]string{"pool": "a"}, want: true},
		"selected and tainted unreachable":                {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{unreachable}, want: true},
		"selected and tainted not-ready":                  {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{notReady}, want: true},
		"unreachable but with a taint it never tolerated": {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{unreachable, dedicated}},
		"unreachable but not selected":                    {labels: map[string]string{"pool": "b"}, taints: []corev1.Taint{unreachable}},
		"a taint it never tolerated":                      {labels: map[string]string{"pool": "a"}, taints: []corev1.Taint{dedicated}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}, Spec: corev1.NodeSpec{Taints: tc.taints}}
			if got := eligible(nodes.NewMatcher(spec), n); got != tc.want {
				t.Errorf("eligible = %v, want %v", got, tc.want)
			}
			if len(n.Spec.Taints) != len(tc.taints) {
				t.Errorf("eligible changed the node's taints to %v", n.Spec.Taints)
			}
		})
	}
}
