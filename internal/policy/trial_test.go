package policy

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The trial's DaemonSets are copies of fixtures whose verdicts testdata/policies holds (two
// allowed, one denied); a copy that drifted would test the trial on something no policy test
// describes.
func TestTrialDaemonSetsAreCopiesOfTheFixtures(t *testing.T) {
	paths, err := fs.Glob(trialFiles, "trial/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no trial DaemonSets embedded: %v", err)
	}
	for _, p := range paths {
		embedded, err := fs.ReadFile(trialFiles, p)
		if err != nil {
			t.Fatal(err)
		}
		originals, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "policies", "*", filepath.Base(p)))
		if len(originals) != 1 {
			t.Errorf("%s: %d fixtures of that name under testdata/policies, want 1", p, len(originals))
			continue
		}
		original, err := os.ReadFile(originals[0])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(embedded, original) {
			t.Errorf("%s differs from %s", p, originals[0])
		}
	}
}

// A set whose rules fail on an ordinary DaemonSet is rejected at load, naming the trial DaemonSet
// and the module's line, instead of failing every admission request once in force.
func TestASetThatFailsOnTheTrialDaemonSetsIsRejected(t *testing.T) {
	src := "package daemonguard.policies.p\n\nviolation contains {\"field\": \"metadata.name\", \"msg\": \"m\"} if {\n\tto_number(input.object.metadata.name) > 0\n}\n"
	set, err := Compile(context.Background(), []Module{{Name: "configmap/team/p.rego", Source: src}}, nil)
	if set != nil || err == nil || !strings.Contains(err.Error(), "trial DaemonSet ") || !strings.Contains(err.Error(), "configmap/team/p.rego:4") {
		t.Errorf("set %v, err %v; want no set and an error naming the trial DaemonSet and configmap/team/p.rego:4", set, err)
	}
}

// The trial runs every operation a set serves: a rule that fails only on the audit's operation is
// found at load, not at the first audit pass, and so is one that fails only in the inject policy.
func TestTheTrialRunsEveryOperation(t *testing.T) {
	tests := map[string]struct {
		module string // a module that fails only on some evaluations
		want   string // in the load error
	}{
		"a validation rule that fails only on AUDIT": {
			module: "package daemonguard.policies.p\n\nviolation contains {\"field\": \"metadata.name\", \"msg\": \"m\"} if {\n\tinput.operation == \"AUDIT\"\n\tto_number(input.object.metadata.name) > 0\n}\n",
			want:   "(AUDIT)",
		},
		"a validation rule that fails only on CHECK": {
			module: "package daemonguard.policies.p\n\nviolation contains {\"field\": \"metadata.name\", \"msg\": \"m\"} if {\n\tinput.operation == \"CHECK\"\n\tto_number(input.object.metadata.name) > 0\n}\n",
			want:   "(CHECK)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			set, err := Compile(context.Background(), []Module{{Name: "configmap/team/p.rego", Source: tc.module}}, nil)
			if set != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "configmap/team/p.rego:5") {
				t.Errorf("set %v, err %v; want no set and an error naming %s and configmap/team/p.rego:5", set, err, tc.want)
			}
		})
	}
}
