package preflight

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/daemonguard/daemonguard/internal/exitcode"
)

// TestExitStatus holds the order of the plan's outcomes: an error, a denial, a pod that does not
// fit, an analysis gate that would not pass today, fine.
func TestExitStatus(t *testing.T) {
	fine := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{}}
	notFit := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Summary: Summary{NotFit: 1}}}
	preempts := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Summary: Summary{Preempting: 1}}}
	denied := Report{Admission: AdmissionReport{Allowed: false}}
	broken := Report{Error: "decode object"}
	gateFails := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Analysis: &AnalysisCheck{Ran: true, Gates: []GateCheck{{Name: "errors", Result: GateFail}}}}}
	noPrometheus := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Analysis: &AnalysisCheck{Gates: []GateCheck{{Name: "errors", Result: GateError}}}}}
	notRun := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Analysis: &AnalysisCheck{NotRun: gatesNotRun, Gates: []GateCheck{{Name: "errors", Result: GateNotRun}}}}}
	cases := []struct {
		name    string
		reports []Report
		want    int
	}{
		{"nothing to plan", nil, 0},
		{"fine", []Report{fine, fine}, 0},
		{"not fit", []Report{fine, notFit}, exitPlanNotFit},
		{"preempts", []Report{preempts}, exitPlanNotFit},
		{"a denial outranks a pod that does not fit", []Report{notFit, denied}, exitPlanDenied},
		{"an error outranks everything", []Report{denied, broken, notFit}, 1},
		{"a gate that would not pass today", []Report{fine, gateFails}, exitPlanGates},
		{"Prometheus not answering is a finding", []Report{noPrometheus}, exitPlanGates},
		{"gates not run find nothing", []Report{notRun}, 0},
		{"a pod that does not fit outranks a gate", []Report{gateFails, notFit, gateFails}, exitPlanNotFit},
		{"a denial outranks a gate", []Report{gateFails, denied}, exitPlanDenied},
	}
	for _, tc := range cases {
		if got := ExitStatus(tc.reports); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestFleetFlags: --contexts is comma-separated and repeatable, in the order given; what cannot
// name a fleet is refused before any cluster is reached.
func TestFleetFlags(t *testing.T) {
	tests := map[string]struct {
		args     []string
		contexts []string // the fleet parsed, when valid
		wantErr  string   // "" when valid
	}{
		"no --contexts is one cluster":           {args: nil},
		"a comma-separated list":                 {args: []string{"--contexts", "canary,prod-eu"}, contexts: []string{"canary", "prod-eu"}},
		"repeated, in the order given":           {args: []string{"--contexts", "b", "--contexts", "a,c"}, contexts: []string{"b", "a", "c"}},
		"one context is a fleet of one":          {args: []string{"--contexts=canary"}, contexts: []string{"canary"}},
		"an empty list names no context":         {args: []string{"--contexts="}, wantErr: "--contexts names no context"},
		"an empty name between commas":           {args: []string{"--contexts", "a,,b"}, wantErr: "--contexts has an empty context name"},
		"a context named twice":                  {args: []string{"--contexts", "a,b", "--contexts", "a"}, wantErr: `--contexts names context "a" twice`},
		"no cluster at a time":                   {args: []string{"--contexts", "a", "--parallel", "0"}, wantErr: "--parallel 0: must be at least 1"},
		"no time for a cluster":                  {args: []string{"--contexts", "a", "--cluster-timeout", "0s"}, wantErr: "--cluster-timeout 0s: must be positive"},
		"a bad bound without --contexts is moot": {args: []string{"--parallel", "0"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var f Fleet
			fs := pflag.NewFlagSet("plan", pflag.ContinueOnError)
			f.AddFlags(fs, time.Minute)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := f.Validate(fs)
			switch {
			case tc.wantErr != "":
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("error %v", err)
			case !slices.Equal(f.Contexts, tc.contexts) || f.On() != (len(tc.contexts) > 0):
				t.Errorf("contexts %q (on: %v), want %q", f.Contexts, f.On(), tc.contexts)
			}
		})
	}
	var f Fleet
	fs := pflag.NewFlagSet("plan", pflag.ContinueOnError)
	f.AddFlags(fs, time.Minute)
	many := make([]string, maxFleetContexts+1)
	for i := range many {
		many[i] = fmt.Sprintf("c%d", i)
	}
	if err := fs.Parse([]string{"--contexts", strings.Join(many, ",")}); err != nil {
		t.Fatal(err)
	}
	if err := f.Validate(fs); err == nil || !strings.Contains(err.Error(), "more than 1000") {
		t.Errorf("%d contexts: error %v", len(many), err)
	}
}

// TestFleetExitStatus: a cluster that could not be planned outranks every finding of the others;
// otherwise the fleet exits as its most serious cluster.
func TestFleetExitStatus(t *testing.T) {
	plan := func(code int) ClusterPlan { return ClusterPlan{ExitCode: code} }
	tests := map[string]struct {
		plans []ClusterPlan
		want  int
	}{
		"an empty fleet":                            {nil, 0},
		"every cluster fine":                        {[]ClusterPlan{plan(0), plan(0)}, 0},
		"a gate in one cluster":                     {[]ClusterPlan{plan(0), plan(exitPlanGates)}, exitPlanGates},
		"a denial outranks a pod that does not fit": {[]ClusterPlan{plan(exitPlanNotFit), plan(exitPlanDenied), plan(exitPlanGates)}, exitPlanDenied},
		"an unreachable cluster outranks a denial":  {[]ClusterPlan{plan(exitPlanDenied), {Error: "dial tcp", ExitCode: 1}}, 1},
	}
	for name, tc := range tests {
		if got := FleetExitStatus(tc.plans); got != tc.want {
			t.Errorf("%s: exit %d, want %d", name, got, tc.want)
		}
	}
}

// TestPlanOverContexts runs `rollout plan --contexts` on three fake clusters: one planned, one
// whose RBAC forbids listing nodes, one that cannot be reached. Each is its own entry, in the
// order of --contexts, and the fleet exits 1; a plan of one cluster through --context's connect
// is what it was without the option.
func TestPlanOverContexts(t *testing.T) {
	forbidden := fake.NewClientset()
	forbidden.PrependReactor("list", "nodes", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New(`User "ci" cannot list resource "nodes"`))
	})
	clients := map[string]kubernetes.Interface{"canary": agentCluster(true), "locked": forbidden}
	var reached []string
	var mu sync.Mutex
	connectTo := func(kubeContext string) (kubernetes.Interface, string, error) {
		mu.Lock()
		defer mu.Unlock()
		reached = append(reached, kubeContext)
		if c, ok := clients[kubeContext]; ok {
			return c, "agents", nil
		}
		return nil, "", fmt.Errorf("load kubeconfig: context %q does not exist", kubeContext)
	}
	one := func() (kubernetes.Interface, string, error) { return agentCluster(true), "agents", nil }
	run := func(args ...string) (string, int) {
		cmd := NewPlanCommand(one, WithContexts(connectTo))
		cmd.SilenceUsage, cmd.SilenceErrors = true, true
		var out bytes.Buffer
		cmd.SetIn(strings.NewReader(agentManifest))
		cmd.SetOut(&out)
		cmd.SetErr(new(bytes.Buffer))
		cmd.SetArgs(append([]string{"-f", "-"}, args...))
		err := cmd.ExecuteContext(t.Context())
		var code exitcode.Error
		if err != nil && !errors.As(err, &code) {
			t.Fatalf("rollout plan %v: %v", args, err)
		}
		return out.String(), code.Code
	}

	out, code := run("--contexts", "canary,locked", "--contexts", "gone", "-o", "json")
	var doc struct {
		Clusters []ClusterPlan `json:"clusters"`
		ExitCode int           `json:"exitCode"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	if code != 1 || doc.ExitCode != 1 || len(doc.Clusters) != 3 {
		t.Fatalf("exit %d, exitCode %d, %d clusters, want 1, 1, 3:\n%s", code, doc.ExitCode, len(doc.Clusters), out)
	}
	canary, locked, gone := doc.Clusters[0], doc.Clusters[1], doc.Clusters[2]
	if canary.Context != "canary" || canary.Error != "" || len(canary.Items) != 1 || canary.Items[0].Plan == nil || canary.Items[0].Plan.Summary.Replaced != 4 {
		t.Errorf("canary: %+v", canary)
	}
	if locked.Context != "locked" || locked.ExitCode != 1 || !strings.Contains(locked.Error, `list nodes: nodes is forbidden: User "ci" cannot list resource "nodes"`) {
		t.Errorf("locked: %+v", locked)
	}
	if gone.Context != "gone" || gone.ExitCode != 1 || gone.Error != `load kubeconfig: context "gone" does not exist` || gone.Items == nil {
		t.Errorf("gone: %+v", gone)
	}
	slices.Sort(reached)
	if !slices.Equal(reached, []string{"canary", "gone", "locked"}) {
		t.Errorf("contexts reached %q", reached)
	}

	single, singleCode := run("-o", "json")
	fleet, _ := json.Marshal(canary.Items)
	var items struct {
		Items json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal([]byte(single), &items); err != nil {
		t.Fatal(err)
	}
	if singleCode != canary.ExitCode || !jsonEqual(t, items.Items, fleet) {
		t.Errorf("the plan of one cluster (exit %d) is not the fleet's plan of the same cluster (exit %d):\n%s\n%s", singleCode, canary.ExitCode, items.Items, fleet)
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
