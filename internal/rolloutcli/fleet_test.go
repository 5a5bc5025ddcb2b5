package rolloutcli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/daemonguard/daemonguard/internal/preflight"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// A fleet's status lines: one per cluster in the order given, the error in the message column
// of a cluster that could not be read, and every cell on one line.
func TestRenderFleetStatus(t *testing.T) {
	rows := []ContextStatus{
		{Context: "canary", Revision: "6b9c5f7d4", Status: StatusReport{Phase: rolloutapi.PhaseComplete, Done: true, Updated: 4, Desired: 4, ControllerCounts: true,
			Step: "3/3", StepSpec: "done", Message: `daemon set "agent" successfully rolled out (4 of 4 nodes run revision 6b9c5f7d4)`}},
		{Context: "prod-eu", Status: StatusReport{Phase: rolloutapi.PhasePaused, Paused: true, Updated: 1, Desired: 40, ControllerCounts: true, Step: "2/3", StepSpec: "pause",
			Message: "rollout of daemon set \"agent\" is paused: PausedAtStep: step 2/3 (pause):\npaused until\tresumed"}},
		{Context: "prod-us", Err: errors.New(`get daemon set agents/agent: Get "https://127.0.0.1:1/apis/apps/v1/namespaces/agents/daemonsets/agent": dial tcp 127.0.0.1:1: connect: connection refused`)},
	}
	var buf bytes.Buffer
	if err := RenderFleetStatus(&buf, rows); err != nil {
		t.Fatal(err)
	}
	want := `CONTEXT  REVISION   PHASE     UPDATED  STEP         MESSAGE
canary   6b9c5f7d4  Complete  4/4      3/3 (done)   daemon set "agent" successfully rolled out (4 of 4 nodes run revision 6b9c5f7d4)
prod-eu  unknown    Paused    1/40     2/3 (pause)  rollout of daemon set "agent" is paused: PausedAtStep: step 2/3 (pause): paused until resumed
prod-us  -          Error     -        -            get daemon set agents/agent: Get "https://127.0.0.1:1/apis/apps/v1/namespaces/agents/daemonsets/agent": dial tcp 127.0.0.1:1: connect: connection refused
`
	if got := buf.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// The exit status of a fleet status: 1 for a failure or a cluster not read, whatever the
// others; 2 while some rollout is under way; 0 when every cluster is done.
func TestFleetStatusExit(t *testing.T) {
	done := ContextStatus{Status: StatusReport{Phase: rolloutapi.PhaseComplete, Done: true}}
	notRolling := ContextStatus{Status: StatusReport{Phase: rolloutapi.PhaseNotRolling, Done: true}}
	progressing := ContextStatus{Status: StatusReport{Phase: rolloutapi.PhaseProgressing}}
	paused := ContextStatus{Status: StatusReport{Phase: rolloutapi.PhasePaused, Paused: true}}
	failed := ContextStatus{Status: StatusReport{Phase: rolloutapi.PhaseFailed, Failed: true}}
	unreachable := ContextStatus{Err: errors.New("connection refused")}
	tests := map[string]struct {
		rows []ContextStatus
		want int
	}{
		"every cluster complete":                          {[]ContextStatus{done, done}, 0},
		"an OnDelete DaemonSet nothing rolls out is done": {[]ContextStatus{done, notRolling}, 0},
		"one cluster still progressing":                   {[]ContextStatus{done, progressing}, exitFleetUnfinished},
		"a pause is unfinished, not failed":               {[]ContextStatus{paused, done}, exitFleetUnfinished},
		"a failed rollout outranks one under way":         {[]ContextStatus{progressing, failed, done}, 1},
		"an unreachable cluster is a failure":             {[]ContextStatus{done, unreachable}, 1},
	}
	for name, tc := range tests {
		if got := FleetStatusExit(tc.rows); got != tc.want {
			t.Errorf("%s: exit %d, want %d", name, got, tc.want)
		}
	}
}

// FleetStatus reads the DaemonSet in every context and evaluates it as status does for one
// cluster; a cluster without it, one that fails, and one that cannot be reached are lines with
// their errors.
func TestFleetStatusReadsEveryContext(t *testing.T) {
	clusters := map[string]kubernetes.Interface{
		"canary": fake.NewClientset(fixture()),
		"prod":   fake.NewClientset(fixture(managed, cond(rolloutapi.ConditionFailed, "PodFailure", "new pods fail: node-2: ImagePullBackOff"), annotate(rolloutapi.StatusFailedRevision, "abc"))),
		"empty":  fake.NewClientset(),
	}
	connectTo := func(kubeContext string) (kubernetes.Interface, string, error) {
		if c, ok := clusters[kubeContext]; ok {
			return c, "mon", nil
		}
		return nil, "", fmt.Errorf("load kubeconfig: context %q does not exist", kubeContext)
	}
	f := preflight.Fleet{Contexts: []string{"prod", "canary", "empty", "gone"}, Parallel: 2, ClusterTimeout: time.Minute}
	rows := FleetStatus(t.Context(), f, connectTo, "agent")
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4", len(rows))
	}
	for i, want := range []struct {
		context string
		phase   rolloutapi.Phase
		err     string // "" when read
	}{
		{"prod", rolloutapi.PhaseFailed, ""},
		{"canary", rolloutapi.PhaseComplete, ""},
		{"empty", "", `get daemon set mon/agent: daemonsets.apps "agent" not found`},
		{"gone", "", `load kubeconfig: context "gone" does not exist`},
	} {
		r := rows[i]
		errText := ""
		if r.Err != nil {
			errText = r.Err.Error()
		}
		if r.Context != want.context || r.Status.Phase != want.phase || errText != want.err {
			t.Errorf("row %d: %s, phase %q, error %q; want %s, %q, %q", i, r.Context, r.Status.Phase, errText, want.context, want.phase, want.err)
		}
	}
	if !strings.Contains(rows[0].Status.Message, "PodFailure: new pods fail: node-2: ImagePullBackOff") || FleetStatusExit(rows) != 1 {
		t.Errorf("the failed cluster: %+v, exit %d", rows[0].Status, FleetStatusExit(rows))
	}
}
