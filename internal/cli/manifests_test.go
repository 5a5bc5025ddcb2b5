package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/manifest"
	"github.com/daemonguard/daemonguard/internal/policy"
)

func builtinSet(t *testing.T) *policy.Set {
	t.Helper()
	set, err := policy.CompileDirs(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

var expectLine = regexp.MustCompile(`(?m)^# expect: (\S+)`)

// The fixtures in testdata/policies are the contract of the built-in policies with default
// parameters: every allowed/ manifest passes, every denied/ one is denied by the policy its
// "# expect:" line names.
func TestFixtures(t *testing.T) {
	set := builtinSet(t)
	for _, dir := range []string{"allowed", "denied"} {
		files, err := filepath.Glob(filepath.Join("..", "..", "testdata", "policies", dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no fixtures in testdata/policies/%s", dir)
		}
		for _, f := range files {
			t.Run(dir+"/"+filepath.Base(f), func(t *testing.T) {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				docs, err := manifest.Read([]string{f}, nil)
				if err != nil || len(docs) != 1 {
					t.Fatalf("read: %v (%d docs)", err, len(docs))
				}
				r := simulate(context.Background(), set, docs[0], markedDefault)
				if err := r.Err(); err != nil {
					t.Fatal(err)
				}
				if dir == "allowed" {
					if !r.Verdict.Allowed {
						t.Errorf("denied: %s", r.Verdict.DenialMessage())
					}
					return
				}
				m := expectLine.FindSubmatch(data)
				if m == nil {
					t.Fatal("denied fixture lacks a '# expect: <policy>' line")
				}
				if r.Verdict.Allowed {
					t.Fatalf("allowed, want a denial by %s; violations: %v", m[1], r.Violations)
				}
				found := false
				for _, d := range r.Verdict.Denials {
					found = found || d.Policy == string(m[1])
				}
				if !found {
					t.Errorf("denied by %v, want %s", r.Verdict.Denials, m[1])
				}
			})
		}
	}
}

// markedDefault is what check knows when the manifests hold the Namespace default marked for node
// agents.
var markedDefault = map[string]map[string]string{"default": {admission.NodeAgentsLabel: "true"}}

func TestSeedIsMutatedAndAllowed(t *testing.T) {
	docs, err := manifest.Read([]string{filepath.Join("..", "..", "testdata", "demo", "nginx-ds.yaml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := simulate(context.Background(), builtinSet(t), docs[0], markedDefault)
	if err := r.Err(); err != nil || !r.Verdict.Allowed {
		t.Fatalf("seed not allowed: %v %v", err, r.Violations)
	}
	if len(r.Patch) == 0 || !strings.Contains(string(r.Mutated), `"priorityClassName":"system-node-critical"`) ||
		!strings.Contains(string(r.Mutated), "node-role.kubernetes.io/control-plane") {
		t.Errorf("seed not mutated as admission would: %s", r.Mutated)
	}
}

// Injection is for namespaces an administrator marked; a label on the DaemonSet opts out of it,
// never out of validation.
func TestInjectionOnlyInMarkedNamespaces(t *testing.T) {
	const wide = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, namespace: %s%s}\n" +
		"spec:\n  selector: {matchLabels: {app: a}}\n  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: %s}}\n" +
		"  template:\n    metadata: {labels: {app: a}}\n    spec: {containers: [{name: a, image: busybox}]}\n"
	const marked = "apiVersion: v1\nkind: Namespace\nmetadata: {name: agents, labels: {daemonguard.io/node-agents: \"true\"}}\n---\n"
	const ignore = ", labels: {daemonguard.io/ignore: \"true\"}"
	cases := map[string]struct {
		manifests  string
		wantInject bool
		wantDenied bool
		wantReason string // the reason not to inject, when wantInject is false
	}{
		"a DaemonSet in a namespace the manifests mark is injected": {
			manifests: marked + fmt.Sprintf(wide, "agents", "", "1"), wantInject: true,
		},
		"a DaemonSet in a namespace the manifests do not hold gets nothing": {
			manifests: fmt.Sprintf(wide, "team-a", "", "1"), wantReason: "namespace team-a is not marked for node agents",
		},
		"a Namespace without the mark does not mark it": {
			manifests:  "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a, labels: {daemonguard.io/node-agent: \"true\"}}\n---\n" + fmt.Sprintf(wide, "team-a", "", "1"),
			wantReason: "namespace team-a is not marked for node agents",
		},
		"a mark under a mis-cased metadata key, which the API server drops, does not mark it": {
			manifests:  "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\nMetadata: {labels: {daemonguard.io/node-agents: \"true\"}}\n---\n" + fmt.Sprintf(wide, "team-a", "", "1"),
			wantReason: "namespace team-a is not marked for node agents",
		},
		"the ignore label opts out of injection in a marked namespace": {
			manifests: marked + fmt.Sprintf(wide, "agents", ignore, "1"), wantReason: "labelled daemonguard.io/ignore=true",
		},
		"the ignore label does not opt out of validation": {
			manifests: marked + fmt.Sprintf(wide, "agents", ignore, `"100%"`), wantDenied: true, wantReason: "labelled daemonguard.io/ignore=true",
		},
		"an unmarked namespace is still validated": {
			manifests: fmt.Sprintf(wide, "team-a", "", `"100%"`), wantDenied: true, wantReason: "not marked",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			docs, err := manifest.Read([]string{"-"}, strings.NewReader(tc.manifests))
			if err != nil {
				t.Fatal(err)
			}
			ds := docs[len(docs)-1]
			r := simulate(context.Background(), builtinSet(t), ds, manifest.NamespaceLabels(docs))
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			if got := len(r.Patch) > 0; got != tc.wantInject {
				t.Errorf("injected = %v, want %v (decision %+v)", got, tc.wantInject, r.Inject)
			}
			if !tc.wantInject && !strings.Contains(r.Inject.Reason, tc.wantReason) {
				t.Errorf("reason not to inject = %q, want it to contain %q", r.Inject.Reason, tc.wantReason)
			}
			if r.Verdict.Allowed == tc.wantDenied {
				t.Errorf("allowed = %v, want %v; violations %v", r.Verdict.Allowed, !tc.wantDenied, r.Violations)
			}
		})
	}
}
