package clustertest

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The seed decodes strictly, and a change survives the round trip through the codec.
func TestSeedYAMLChangesOnlyWhatItIsAsked(t *testing.T) {
	seed := SeedObject(t)
	if seed.Name != "nginx-ds" || seed.Spec.Template.Spec.Containers[0].Image != "nginx:1.7.9" {
		t.Fatalf("the seed is %s running %s, want nginx-ds running nginx:1.7.9", seed.Name, seed.Spec.Template.Spec.Containers[0].Image)
	}
	edited, err := DecodeDaemonSet([]byte(SeedYAML(t, func(ds *appsv1.DaemonSet) { ds.Spec.Template.Spec.Containers[0].Image = "agent:2" })))
	if err != nil {
		t.Fatal(err)
	}
	if got := edited.Spec.Template.Spec.Containers[0].Image; got != "agent:2" {
		t.Errorf("edited image %q, want agent:2", got)
	}
	edited.Spec.Template.Spec.Containers[0].Image = "nginx:1.7.9"
	if edited.String() != seed.String() {
		t.Errorf("the round trip changed more than the image:\n%s\nwant\n%s", edited, seed)
	}
}

func TestDecodeDaemonSetRefusesUnknownFields(t *testing.T) {
	_, err := DecodeDaemonSet([]byte("apiVersion: apps/v1\nkind: DaemonSet\nspec:\n  updateStrategi: {}\n"))
	if err == nil || !strings.Contains(err.Error(), "updateStrategi") {
		t.Errorf("a misspelt field: err = %v, want it named", err)
	}
}
