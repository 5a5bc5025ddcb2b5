package agentmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// Each node serves the value of its pod's revision, with the noise, except for terminating pods,
// pods of another owner, unscheduled pods and dropped nodes; read from the API server at every
// scrape, and from informers after Watch.
func TestSeriesFollowThePodOnEachNode(t *testing.T) {
	for _, watch := range []bool{false, true} {
		t.Run(map[bool]string{false: "list", true: "watch"}[watch], func(t *testing.T) { testSeriesFollowThePodOnEachNode(t, watch) })
	}
}

// testSeriesFollowThePodOnEachNode checks the series of one exporter, reading pods as watch says.
func testSeriesFollowThePodOnEachNode(t *testing.T, watch bool) {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "ns", UID: "ds-uid"}}
	pod := func(name, node, rev string, opts ...func(*corev1.Pod)) runtime.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: rev},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-uid", Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: node}}
		for _, o := range opts {
			o(p)
		}
		return p
	}
	terminating := func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }
	other := func(p *corev1.Pod) { p.OwnerReferences[0].UID = "other" }
	client := fake.NewClientset(ds,
		pod("a", "w1", "v1"), pod("b", "w2", "v2"), pod("c", "w3", "v1", terminating), pod("d", "w3", "v2"),
		pod("e", "w4", "v1", other), pod("f", "", "v1"), pod("g", "w5", "v3"))
	e := New(client, "ns", "agent")
	if watch {
		e.Watch(t)
	}
	e.Set("v2", 0.5)
	e.Set("v1", 0)
	e.SetOthers(1)
	e.SetNoise(0.25)
	e.Drop("w2", true)
	want := `
# HELP agent_error_ratio Share of records the node agent failed to handle (test exporter).
# TYPE agent_error_ratio gauge
agent_error_ratio{namespace="ns",node="w1",revision="v1"} 0.25
agent_error_ratio{namespace="ns",node="w3",revision="v2"} 0.75
agent_error_ratio{namespace="ns",node="w5",revision="v3"} 1.25
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
