package preflight

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

// readPods returns every pod slimmed, in the API server's order: by namespace/name, so "a-b"'s
// pods come before "a"'s ('-' sorts before '/').
func TestReadPodsInTheAPIOrderSlimmed(t *testing.T) {
	var objects []runtime.Object
	for _, nn := range [][2]string{{"b", "z"}, {"a", "y"}, {"a-b", "x"}, {"a", "b"}} {
		p := fatPod()
		p.Namespace, p.Name, p.UID = nn[0], nn[1], types.UID("uid-"+nn[0]+"-"+nn[1])
		objects = append(objects, p)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pods, err := readPods(ctx, fake.NewClientset(objects...))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range pods {
		got = append(got, p.Namespace+"/"+p.Name)
		if p.Annotations != nil || p.ManagedFields != nil || p.Spec.Volumes != nil || p.Spec.Containers[0].Env != nil {
			t.Errorf("%s/%s is not slimmed: %+v", p.Namespace, p.Name, p)
		}
	}
	if want := "a-b/x a/b a/y b/z"; strings.Join(got, " ") != want {
		t.Errorf("pods %v, want %s", got, want)
	}
}

// An error before every pod is read fails the plan with it, where an informer would retry for
// ever (and this test would get the deadline's error instead); the caller's deadline ends a read
// that never completes.
func TestReadPodsFailsOnTheFirstError(t *testing.T) {
	client := fake.NewClientset(fatPod())
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New(`User "ci" cannot list resource "pods"`))
	client.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := readPods(ctx, client)
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "list pods: ") || !strings.Contains(err.Error(), `cannot list resource "pods"`) {
		t.Errorf("got %v, want the forbidden list, named", err)
	}

	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	stuck := fake.NewClientset()
	stuck.PrependReactor("list", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		<-ctx.Done()
		return true, nil, ctx.Err()
	})
	if _, err := readPods(ctx, stuck); err == nil {
		t.Error("a read that never completed returned no error")
	}
}

// fatPod is a pod as the API server lists it, with everything slimPod drops and everything the
// plan reads.
func fatPod() *corev1.Pod {
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz"}}}
	container := func(name string) corev1.Container {
		return corev1.Container{
			Name: name, Image: "app:1", Command: []string{"/app"}, Args: []string{"--serve"},
			Env:           []corev1.EnvVar{{Name: "LOG_LEVEL", Value: "info"}},
			VolumeMounts:  []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			Resources:     corev1.ResourceRequirements{Requests: requests, Limits: requests},
			Ports:         []corev1.ContainerPort{{ContainerPort: 9100, HostPort: 9100, Protocol: corev1.ProtocolTCP}},
			LivenessProbe: probe, ReadinessProbe: probe, StartupProbe: probe,
		}
	}
	sidecar := container("proxy")
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "app-1", Namespace: "team", UID: "u1", Labels: map[string]string{"app": "app"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "app", UID: "rs", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}},
		},
		Spec: corev1.PodSpec{
			NodeName: "n", Priority: ptr.To(int32(100)), PriorityClassName: "batch",
			InitContainers: []corev1.Container{sidecar},
			Containers:     []corev1.Container{container("app")},
			Overhead:       corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			Volumes:        []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: ptr.To(metav1.Unix(1000, 0)),
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func TestSlimPodKeepsWhatThePlanReads(t *testing.T) {
	slim := slimPod(fatPod())
	if slim.ManagedFields != nil || slim.Annotations != nil || slim.Spec.Volumes != nil ||
		slim.Spec.Containers[0].Env != nil || slim.Spec.Containers[0].LivenessProbe != nil || slim.Spec.InitContainers[0].Command != nil {
		t.Errorf("slimPod kept what the plan never reads: %+v", slim)
	}
	fat := fatPod()
	for what, same := range map[string]bool{
		"labels and owners": reflect.DeepEqual(slim.Labels, fat.Labels) && reflect.DeepEqual(slim.OwnerReferences, fat.OwnerReferences),
		"node and priority": slim.Spec.NodeName == fat.Spec.NodeName && *slim.Spec.Priority == *fat.Spec.Priority &&
			slim.Spec.PriorityClassName == fat.Spec.PriorityClassName,
		"requests, ports, restart policy": reflect.DeepEqual(slim.Spec.Containers[0].Resources, fat.Spec.Containers[0].Resources) &&
			reflect.DeepEqual(slim.Spec.Containers[0].Ports, fat.Spec.Containers[0].Ports) &&
			reflect.DeepEqual(slim.Spec.InitContainers[0].RestartPolicy, fat.Spec.InitContainers[0].RestartPolicy),
		"overhead and status": reflect.DeepEqual(slim.Spec.Overhead, fat.Spec.Overhead) && reflect.DeepEqual(slim.Status, fat.Status),
	} {
		if !same {
			t.Errorf("slimPod changed the %s", what)
		}
	}

	// The scheduler's verdict is the same against the slim pod: a new pod that needs its host
	// port and more CPU than is left, and may preempt it.
	node := mkNode("n", allocatable("4", 10))
	newPod := mkPod("default", "new", "", requests("2"), prio(1000))
	newPod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 9100, HostPort: 9100, Protocol: corev1.ProtocolTCP}}
	want := Fit(newPod, node, []*corev1.Pod{fatPod()})
	if got := Fit(newPod, node, []*corev1.Pod{slim}); !reflect.DeepEqual(got, want) {
		t.Errorf("Fit against the slim pod = %+v, against the full pod %+v", got, want)
	}
	if len(want.Insufficient) == 0 || len(want.HostPortConflicts) == 0 {
		t.Errorf("the case does not exercise requests and ports: %+v", want)
	}
}
