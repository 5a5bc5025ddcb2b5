package harness

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Release is a helm release of the chart on a local cluster: helm runs against the cluster with
// its state in a folder of the test's, and the release's objects are read back as helm stored
// them, e.g. a Deployment for RunComponent.
type Release struct {
	Cluster   *localcluster.Cluster
	Name      string
	Namespace string
	env       []string
}

// NewRelease is the release name in namespace ns of c; helm keeps its configuration, cache and
// data under dir. Nothing is installed yet: call Helm("install", ...).
func NewRelease(c *localcluster.Cluster, name, ns, dir string) *Release {
	return &Release{Cluster: c, Name: name, Namespace: ns, env: append(c.Env(),
		"HELM_CONFIG_HOME="+filepath.Join(dir, "config"), "HELM_CACHE_HOME="+filepath.Join(dir, "cache"),
		"HELM_DATA_HOME="+filepath.Join(dir, "data"))}
}

// helmPath finds (or builds) helm from the tools module, once per test process.
var helmPath = sync.OnceValues(func() (string, error) {
	b, err := toolbin.Ensure(context.Background(), os.Stderr, "helm")
	if err != nil {
		return "", err
	}
	return b.Path("helm"), nil
})

// Helm runs helm against the release's cluster and returns what it printed.
func (r *Release) Helm(args ...string) (string, error) {
	helm, err := helmPath()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(helm, args...)
	cmd.Env = r.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Manifest returns the objects of the release as helm stored them.
func (r *Release) Manifest(t testing.TB) []*unstructured.Unstructured {
	t.Helper()
	out, err := r.Helm("get", "manifest", r.Name, "--namespace", r.Namespace)
	if err != nil {
		t.Fatalf("helm get manifest %s: %v\n%s", r.Name, err, out)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decode the manifest of release %s: %v", r.Name, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// Object returns the release's only object of kind whose name ends in suffix.
func (r *Release) Object(t testing.TB, kind, suffix string) *unstructured.Unstructured {
	t.Helper()
	var found *unstructured.Unstructured
	for _, o := range r.Manifest(t) {
		if o.GetKind() == kind && strings.HasSuffix(o.GetName(), suffix) {
			if found != nil {
				t.Fatalf("two %s objects named *%s: %s and %s", kind, suffix, found.GetName(), o.GetName())
			}
			found = o
		}
	}
	if found == nil {
		t.Fatalf("release %s has no %s named *%s", r.Name, kind, suffix)
	}
	return found
}

// Deployment returns the release's Deployment whose name ends in suffix, in the release's
// namespace, for RunComponent.
func (r *Release) Deployment(t testing.TB, suffix string) *appsv1.Deployment {
	t.Helper()
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(r.Object(t, "Deployment", suffix).Object, &dep); err != nil {
		t.Fatal(err)
	}
	dep.Namespace = r.Namespace
	return &dep
}
