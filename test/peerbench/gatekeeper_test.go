package peerbench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestCRDDocuments(t *testing.T) {
	stream := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: gatekeeper-system\n---\n" +
		"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: a.b\n---\n" +
		"apiVersion: apps/v1\nkind: Deployment\nspec:\n  template: {}\n---\n" +
		"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: c.d\n"
	got := crdDocuments(stream)
	if len(got) != 2 || !strings.Contains(got[0], "name: a.b") || !strings.Contains(got[1], "name: c.d") {
		t.Errorf("crdDocuments kept %q, want the two CRDs", got)
	}
}

// The review Gatekeeper must deny before the run differs from the benchmark's review only in
// maxUnavailable, and still decodes.
func TestOverBudget(t *testing.T) {
	cases, err := reviewCases()
	if err != nil {
		t.Fatal(err)
	}
	review := cases[0].WithUID("00000000-0000-4000-8000-000000000001")
	over, err := overBudget(review)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Request struct {
			Object struct {
				Spec struct {
					UpdateStrategy struct {
						RollingUpdate struct {
							MaxUnavailable any `json:"maxUnavailable"`
						} `json:"rollingUpdate"`
					} `json:"updateStrategy"`
				} `json:"spec"`
			} `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(over, &r); err != nil {
		t.Fatal(err)
	}
	if got := r.Request.Object.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable; got != "90%" {
		t.Errorf("maxUnavailable %v, want 90%%", got)
	}
	if len(over)-len(review) != len(`"90%"`)-len(`1`) || !bytes.HasPrefix(over, review[:bytes.Index(review, []byte(`"maxUnavailable":1`))]) {
		t.Error("overBudget changed more than maxUnavailable")
	}
	if _, err := overBudget([]byte(`{"maxUnavailable":2}`)); err == nil {
		t.Error("overBudget of a review without maxUnavailable 1 gave no error")
	}
}
