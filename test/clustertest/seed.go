package clustertest

import (
	"fmt"
	"os"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// SeedManifest returns the path of the seed DaemonSet, testdata/demo/nginx-ds.yaml: nginx-ds
// (label app=nginx-ds) running nginx:1.7.9 on every node whose taints it tolerates.
func SeedManifest(t testing.TB) string {
	t.Helper()
	return RepoFile(t, "testdata", "demo", "nginx-ds.yaml")
}

// SeedDaemonSet returns the seed DaemonSet's manifest with change applied, for kubectl's stdin.
func SeedDaemonSet(t testing.TB, change func(*appsv1.DaemonSet)) string {
	t.Helper()
	data, err := os.ReadFile(SeedManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	edited, err := EditDaemonSet(data, change)
	if err != nil {
		t.Fatal(err)
	}
	return string(edited)
}

// EditDaemonSet decodes a DaemonSet manifest strictly (an unknown field is an error, not a field
// silently dropped), applies change and encodes it again.
func EditDaemonSet(data []byte, change func(*appsv1.DaemonSet)) ([]byte, error) {
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		return nil, fmt.Errorf("parse DaemonSet: %w", err)
	}
	if len(ds.Spec.Template.Spec.Containers) == 0 {
		return nil, fmt.Errorf("DaemonSet %s has no container", ds.Name)
	}
	change(&ds)
	return yaml.Marshal(&ds)
}
