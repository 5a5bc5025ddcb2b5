package preflight

import (
	"encoding/json"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestApplyMergeIsKubectlApply holds the plan's merge to kubectl apply's three-way semantics: a
// field the last apply set and the manifest drops is removed; a field the server defaulted or
// another writer set, which the manifest never had, stays.
func TestApplyMergeIsKubectlApply(t *testing.T) {
	lastApplied := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"a","namespace":"default"},"spec":{"template":{"spec":{"nodeSelector":{"zone":"a"},"containers":[{"name":"c","image":"img:1"}]}}}}`
	live := &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", Annotations: map[string]string{lastAppliedAnnotation: lastApplied}},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector:  map[string]string{"zone": "a"},
			DNSPolicy:     corev1.DNSClusterFirst, // defaulted by the API server
			Containers:    []corev1.Container{{Name: "c", Image: "img:1", ImagePullPolicy: corev1.PullIfNotPresent}},
			RestartPolicy: corev1.RestartPolicyAlways,
		}}},
	}
	current, err := json.Marshal(live)
	if err != nil {
		t.Fatal(err)
	}
	manifest := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"a","namespace":"default"},"spec":{"template":{"spec":{"containers":[{"name":"c","image":"img:2"}]}}}}`
	merged, err := applyMerge(live, current, []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	var got appsv1.DaemonSet
	if err := json.Unmarshal(merged, &got); err != nil {
		t.Fatal(err)
	}
	spec := got.Spec.Template.Spec
	if spec.NodeSelector != nil {
		t.Errorf("the node selector the last apply set and the manifest dropped is kept: %v", spec.NodeSelector)
	}
	if spec.DNSPolicy != corev1.DNSClusterFirst || spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("defaulted fields are lost: %+v", spec)
	}
	if spec.Containers[0].Image != "img:2" {
		t.Errorf("image = %s, want the manifest's img:2", spec.Containers[0].Image)
	}
	if _, err := applyMerge(live, current, []byte(`{"spec":`)); err == nil {
		t.Error("a manifest that is not JSON must be an error")
	}
}
