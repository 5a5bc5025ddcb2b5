package audit

import (
	"context"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// BenchmarkRun is one audit pass over 2,000 DaemonSets in 20 namespaces on clusters of 1,000 and
// 5,000 nodes, with the built-in policies: what the scale benchmark's audit spends evaluating.
func BenchmarkRun(b *testing.B) {
	set, err := policy.CompileDirs(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			var objs []client.Object
			for i := range 20 {
				objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("team-%02d", i), Labels: map[string]string{admission.NodeAgentsLabel: "true"}}})
			}
			for i := range nodes {
				objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), Labels: map[string]string{"kubernetes.io/os": "linux"}}})
			}
			for i := range 2000 {
				name := fmt.Sprintf("ds-%04d", i)
				objs = append(objs, &appsv1.DaemonSet{
					ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: fmt.Sprintf("team-%02d", i%20)},
					Spec: appsv1.DaemonSetSpec{
						Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
						Template: corev1.PodTemplateSpec{
							ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
							Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "agent:1"}}},
						},
						UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
							RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
					},
				})
			}
			reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build()
			b.ResetTimer()
			for range b.N {
				findings, err := Run(context.Background(), reader, set, nil)
				if err != nil || len(findings) != 2000 {
					b.Fatalf("%d findings, %v", len(findings), err)
				}
			}
		})
	}
}
