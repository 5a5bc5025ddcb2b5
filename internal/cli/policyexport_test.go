package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/inprocess"
	"github.com/daemonguard/daemonguard/internal/policy"
)

func TestPolicyExportPrintsTheGeneratedObjects(t *testing.T) {
	dir := t.TempDir()
	params := "inject: {priorityClassName: system-cluster-critical}\n"
	if err := os.WriteFile(filepath.Join(dir, "parameters.yaml"), []byte(params), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "", "policy", "export", "--policies", dir, "--name", "dg", "--namespace", "agents", "--exempt-namespace", "monitoring")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	docs := strings.Split(out, "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("printed %d documents, want the policy and the binding:\n%s", len(docs), out)
	}
	var gotPolicy admissionregistrationv1.MutatingAdmissionPolicy
	var gotBinding admissionregistrationv1.MutatingAdmissionPolicyBinding
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &gotPolicy); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &gotBinding); err != nil {
		t.Fatal(err)
	}
	modules, merged, err := policy.OverBuiltin([]policy.Source{{Name: dir, Files: map[string]string{"parameters.yaml": params}}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := inprocess.Generate(context.Background(), modules, merged, inprocess.Options{Name: "dg", Namespace: "agents", ExemptNamespaces: []string{"monitoring"}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&gotPolicy, want.Policy) || !reflect.DeepEqual(&gotBinding, want.Binding) {
		t.Errorf("printed objects differ from the generator's:\n%s", out)
	}
	if !strings.Contains(out, `"system-cluster-critical"`) {
		t.Errorf("the --policies parameters did not reach the policy:\n%s", out)
	}
}

func TestPolicyExportRefusesAReplacedInjectPolicy(t *testing.T) {
	dir := t.TempDir()
	rego := "package daemonguard.inject\n\ndecision := {\"inject\": false, \"reason\": \"mine\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "inject.rego"), []byte(rego), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "", "policy", "export", "--policies", dir)
	if !errors.Is(err, inprocess.ErrNotGeneratable) {
		t.Fatalf("error %v, want a refusal; printed:\n%s", err, out)
	}
	if !strings.Contains(err.Error(), "inject.rego") || strings.Contains(out, "kind:") {
		t.Errorf("error %q should name inject.rego and nothing be printed:\n%s", err, out)
	}
}
