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
	"sync/atomic"
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
	run := func(args ...string) (string, int) {
		out, code, err := runFleetPlan(t, connectTo, args...)
		if err != nil {
			t.Fatalf("rollout plan %v: %v", args, err)
		}
		return out, code
	}

	out, code := run("--contexts", "canary,locked", "--contexts", "gone", "-o", "json")
	doc := decodeFleet(t, out)
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

	// The same plan but for the flag that would run the gates, which a fleet names per context.
	single, singleCode := run("-o", "json")
	if a := canary.Items[0].Plan.Analysis; a == nil || !strings.HasPrefix(a.NotRun, "no --prometheus-addresses canary=URL: ") {
		t.Errorf("canary's gates not run: %+v", a)
	} else {
		a.NotRun = gatesNotRun
	}
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

// runFleetPlan runs `rollout plan -f - ARGS` on agentManifest, --context's connect reaching
// agentCluster(true) and --contexts' reaching connectTo, as the root command runs it; it returns
// stdout and the exit status, or the error that is no exit status.
func runFleetPlan(t *testing.T, connectTo func(string) (kubernetes.Interface, string, error), args ...string) (string, int, error) {
	t.Helper()
	one := func() (kubernetes.Interface, string, error) { return agentCluster(true), "agents", nil }
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
		return out.String(), 0, err
	}
	return out.String(), code.Code, nil
}

// fleetDoc is the JSON of a fleet plan.
type fleetDoc struct {
	Clusters []ClusterPlan `json:"clusters"`
	ExitCode int           `json:"exitCode"`
}

func decodeFleet(t *testing.T, out string) fleetDoc {
	t.Helper()
	var doc fleetDoc
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	return doc
}

// TestPlanOverContextsChecksEachClustersPrometheus: --prometheus-addresses gives each context its
// own Prometheus. Canary's does not answer, so its gates are findings (exit 4) while the context
// without one has them listed, not run; one Prometheus for the fleet, or one for a context not in
// it, is refused before any cluster is read.
func TestPlanOverContextsChecksEachClustersPrometheus(t *testing.T) {
	var reached atomic.Int32
	connectTo := func(string) (kubernetes.Interface, string, error) {
		reached.Add(1)
		return agentCluster(true), "agents", nil
	}
	out, code, err := runFleetPlan(t, connectTo, "--contexts", "canary,rest", "--prometheus-addresses", "canary=http://127.0.0.1:1", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	doc := decodeFleet(t, out)
	if code != exitPlanGates || doc.ExitCode != exitPlanGates || len(doc.Clusters) != 2 {
		t.Fatalf("exit %d, exitCode %d, want %d:\n%s", code, doc.ExitCode, exitPlanGates, out)
	}
	canary, rest := doc.Clusters[0], doc.Clusters[1]
	if got := gatesFailing(canary.Items[0].Plan.Analysis); canary.ExitCode != exitPlanGates || got != "errors (no answer), latency (no answer), broken (no answer)" {
		t.Errorf("canary: exit %d, gates failing %q", canary.ExitCode, got)
	}
	if got := gatesFailing(rest.Items[0].Plan.Analysis); rest.ExitCode != 0 || got != "not run" {
		t.Errorf("rest: exit %d, gates failing %q", rest.ExitCode, got)
	}
	if why := rest.Items[0].Plan.Analysis.NotRun; !strings.HasPrefix(why, "no --prometheus-addresses rest=URL: ") {
		t.Errorf("rest's gates were not run because %q, want the flag that runs them in a fleet", why)
	}

	reached.Store(0)
	for args, wantErr := range map[string]string{
		"--contexts a,b --prometheus-address http://prometheus:9090":     "one Prometheus does not answer for the nodes of several clusters",
		"--contexts a,b --prometheus-addresses c=http://prometheus:9090": `--prometheus-addresses names context "c", which --contexts does not`,
		"--prometheus-addresses a=http://prometheus:9090":                "for one cluster use --prometheus-address",
		"--contexts a --prometheus-addresses a=prometheus:9090":          "the Prometheus of context a: Prometheus address",
	} {
		if _, _, err := runFleetPlan(t, connectTo, strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: error %v, want %q", args, err, wantErr)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("refused flags reached %d clusters", n)
	}
}
