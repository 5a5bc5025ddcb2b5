package preflight

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
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

// TestEachContextBoundsTheClustersAtOnce: twelve contexts, three at once at most, each under its
// own timeout; a cluster that never answers and one that fails are their own outcomes, the
// others' values come back in the order of the contexts.
func TestEachContextBoundsTheClustersAtOnce(t *testing.T) {
	var contexts []string
	for i := range 12 {
		contexts = append(contexts, fmt.Sprintf("c%02d", i))
	}
	var running, most atomic.Int32
	f := Fleet{Contexts: contexts, Parallel: 3, ClusterTimeout: 200 * time.Millisecond}
	outcomes := EachContext(t.Context(), f, func(ctx context.Context, name string) (string, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		switch name {
		case "c03": // never answers: waits for its own deadline
			<-ctx.Done()
			return "", fmt.Errorf("list nodes: %w", ctx.Err())
		case "c07":
			return "", errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
		}
		time.Sleep(10 * time.Millisecond) // long enough for the others to pile up
		return "plan of " + name, nil
	})
	if got := most.Load(); got != 3 {
		t.Errorf("at most %d clusters at once, want 3", got)
	}
	for i, o := range outcomes {
		switch {
		case o.Context != contexts[i]:
			t.Errorf("outcome %d is %s's, want %s's", i, o.Context, contexts[i])
		case o.Context == "c03":
			if o.Err == nil || o.Err.Error() != "no answer within 200ms (--cluster-timeout): list nodes: context deadline exceeded" {
				t.Errorf("the cluster that never answers: %v", o.Err)
			}
		case o.Context == "c07":
			if o.Err == nil || !strings.Contains(o.Err.Error(), "connection refused") || strings.Contains(o.Err.Error(), "--cluster-timeout") {
				t.Errorf("the cluster that fails: %v", o.Err)
			}
		case o.Err != nil || o.Value != "plan of "+o.Context:
			t.Errorf("%s: %q, %v", o.Context, o.Value, o.Err)
		}
	}
}

// TestEachContextStartsNothingOnceCancelled: when the caller gives up (an interrupt), the
// contexts not yet started say so instead of being read.
func TestEachContextStartsNothingOnceCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	started := map[string]bool{}
	f := Fleet{Contexts: []string{"a", "b", "c"}, Parallel: 1, ClusterTimeout: time.Minute}
	outcomes := EachContext(ctx, f, func(ctx context.Context, name string) (int, error) {
		started[name] = true // Parallel 1: one at a time
		cancel()
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !started["a"] || started["b"] || started["c"] {
		t.Errorf("started %v, want only a", started)
	}
	for _, o := range outcomes[1:] {
		if o.Err == nil || o.Err.Error() != "context "+o.Context+": not started: context canceled" {
			t.Errorf("%s: %v", o.Context, o.Err)
		}
	}
}
