package clustertest

import (
	"fmt"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// SeedManifest returns the path of the seed DaemonSet, testdata/demo/nginx-ds.yaml: nginx-ds
// (label app=nginx-ds) running nginx:1.7.9 on every node whose taints it tolerates.
func SeedManifest(t testing.TB) string {
	t.Helper()
	return toolbin.RepoPath(t, "testdata", "demo", "nginx-ds.yaml")
}

// SeedObject returns the seed DaemonSet, decoded.
func SeedObject(t testing.TB) *appsv1.DaemonSet {
	t.Helper()
	data, err := os.ReadFile(SeedManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	ds, err := DecodeDaemonSet(data)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// SeedYAML returns the seed DaemonSet's manifest with change applied, for kubectl's stdin.
func SeedYAML(t testing.TB, change func(*appsv1.DaemonSet)) string {
	t.Helper()
	ds := SeedObject(t)
	change(ds)
	data, err := yaml.Marshal(ds)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// EditDaemonSet decodes a DaemonSet manifest (DecodeDaemonSet), applies change and encodes it
// again.
func EditDaemonSet(data []byte, change func(*appsv1.DaemonSet)) ([]byte, error) {
	ds, err := DecodeDaemonSet(data)
	if err != nil {
		return nil, err
	}
	change(ds)
	return yaml.Marshal(ds)
}

// DecodeDaemonSet decodes a DaemonSet manifest strictly: an unknown field is an error, not a
// field silently dropped. A DaemonSet without a container is refused too: every change made
// here edits the first.
func DecodeDaemonSet(data []byte) (*appsv1.DaemonSet, error) {
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		return nil, fmt.Errorf("parse DaemonSet: %w", err)
	}
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("DaemonSet %s has no container", ds.Name)
	}
	return &ds, nil
}
