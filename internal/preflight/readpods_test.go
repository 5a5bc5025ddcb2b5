package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
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
