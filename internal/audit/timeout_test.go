package audit

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// slowPolicy takes seconds on a DaemonSet named "slow" (nine million iterations: 17.6 s on the
// 2-core development machine) and nothing on the others, the trial's DaemonSets included, so
// that it loads.
const slowPolicy = `package daemonguard.policies.slow

violation contains {"field": "metadata.name", "msg": "counted"} if {
	input.object.metadata.name == "slow"
	count([1 | some i in numbers.range(1, 3000); some j in numbers.range(1, 3000); i != j]) > 0
}
`

// A DaemonSet whose evaluation passes the deadline is a finding that names the deadline, and the
// pass goes on: the next DaemonSet is judged as usual, and the pass ends soon after the deadline
// instead of waiting for the slow evaluation.
func TestAnEvaluationPastTheDeadlineIsAFinding(t *testing.T) {
	set, err := policy.Compile(context.Background(), []policy.Module{{Name: "slow.rego", Source: slowPolicy}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	daemonSet := func(name string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"},
			Spec: appsv1.DaemonSetSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}}},
			},
		}
	}
	reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, daemonSet("fast"), daemonSet("slow")).Build()

	const deadline = 200 * time.Millisecond
	start := time.Now()
	findings, err := RunWithin(context.Background(), reader, set, nil, deadline)
	took := time.Since(start)
	if err != nil || len(findings) != 2 {
		t.Fatalf("%d findings, %v; want 2", len(findings), err)
	}
	fast, slow := findings[0], findings[1]
	if fast.Name != "fast" || fast.Error != "" || fast.TimedOut || len(fast.Violations) != 0 {
		t.Errorf("fast: %+v; want judged compliant", fast)
	}
	if slow.Name != "slow" || !slow.TimedOut || !strings.Contains(slow.Error, "deadline of 200ms per DaemonSet") || !slow.Denied() {
		t.Errorf("slow: %+v; want timed out, naming the deadline of 200ms", slow)
	}
	// Generous against a loaded machine, and far below the seconds the slow evaluation takes.
	if took > 10*deadline {
		t.Errorf("the pass took %s; want it to end soon after the %s deadline", took, deadline)
	}

}
