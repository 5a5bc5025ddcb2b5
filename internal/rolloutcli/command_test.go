package rolloutcli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/exitcode"
)

// Argument and flag errors are reported before any cluster is contacted (the kubeconfig given
// does not exist). The commands against a cluster are tested in rollout_cluster_test.go.
func TestRolloutArgumentErrors(t *testing.T) {
	const noKubeconfig = "/nonexistent/kubeconfig"
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"status of a Deployment is refused": {
			args: []string{"status", "deployment/web"}, wantErr: "works on DaemonSets only",
		},
		"history of a StatefulSet in TYPE NAME form is refused": {
			args: []string{"history", "sts", "db"}, wantErr: "works on DaemonSets only",
		},
		"undo with an unknown --dry-run mode is refused": {
			args: []string{"undo", "ds/agent", "--dry-run=maybe"}, wantErr: `--dry-run "maybe" is not one of none, client, server`,
		},
		"undo to a negative revision is refused": {
			args: []string{"undo", "ds/agent", "--to-revision=-2"}, wantErr: "--to-revision must be a positive revision number",
		},
		"status with a negative timeout is refused": {
			args: []string{"status", "ds/agent", "--timeout=-1s"}, wantErr: "--timeout must not be negative",
		},
		"a DaemonSet is required": {
			args: []string{"pause"}, wantErr: "accepts between 1 and 2 arg(s)",
		},
		"a valid command reaches the kubeconfig": {
			args: []string{"status", "ds/agent"}, wantErr: "load kubeconfig",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cmd := NewCommand()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetErr(&out)
			cmd.SetArgs(append(tc.args, "--kubeconfig", noKubeconfig))
			err := cmd.ExecuteContext(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("rollout %s: error %v, want %q", strings.Join(tc.args, " "), err, tc.wantErr)
			}
		})
	}
}

// The fleet flags of plan and status are refused before any cluster is contacted when they
// cannot name a fleet, or name it beside a flag that means one cluster.
func TestFleetFlagErrors(t *testing.T) {
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"status with --contexts and --context": {
			args: []string{"status", "ds/agent", "--contexts", "a,b", "--context", "a"}, wantErr: "[context contexts] were all set",
		},
		"plan with --contexts and --context": {
			args: []string{"plan", "-f", "-", "--contexts", "a", "--context", "b"}, wantErr: "[context contexts] were all set",
		},
		"status naming a context twice": {
			args: []string{"status", "ds/agent", "--contexts", "a,b", "--contexts", "b"}, wantErr: `--contexts names context "b" twice`,
		},
		"status over a fleet with --watch": {
			args: []string{"status", "ds/agent", "--contexts", "a,b", "--watch"}, wantErr: "--watch and --timeout do not apply",
		},
		"status over a fleet with --timeout": {
			args: []string{"status", "ds/agent", "--contexts", "a,b", "--timeout=1m"}, wantErr: "--watch and --timeout do not apply",
		},
		"plan over a fleet with no cluster at a time": {
			args: []string{"plan", "-f", "-", "--contexts", "a", "--parallel=0"}, wantErr: "--parallel 0: must be at least 1",
		},
		"plan over a fleet with one Prometheus": {
			args: []string{"plan", "-f", "-", "--contexts", "a,b", "--prometheus-address", "http://prometheus:9090"}, wantErr: "one Prometheus does not answer for the nodes of several clusters",
		},
		"undo takes no --contexts": {
			args: []string{"undo", "ds/agent", "--contexts", "a,b"}, wantErr: "unknown flag: --contexts",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := runWithoutCluster(tc.args...); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("rollout %s: error %v, want %q", strings.Join(tc.args, " "), err, tc.wantErr)
			}
		})
	}
}

// runWithoutCluster runs `rollout args...` as the root command does (no usage on an error)
// with a kubeconfig that does not exist, and returns its stdout.
func runWithoutCluster(args ...string) (string, error) {
	cmd := NewCommand()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(new(bytes.Buffer))
	cmd.SetIn(strings.NewReader(""))
	cmd.SetArgs(append(args, "--kubeconfig", "/nonexistent/kubeconfig"))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

// `status --contexts --watch=false` is the fleet's status, read once: accepted, and each context
// that cannot be loaded is its own line, exit 1.
func TestFleetStatusWatchFalseIsAccepted(t *testing.T) {
	out, err := runWithoutCluster("status", "ds/agent", "--contexts", "a,b", "--watch=false")
	if code := new(exitcode.Error); !errors.As(err, code) || code.Code != 1 {
		t.Fatalf("error %v, want exit status 1", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "a ") || !strings.HasPrefix(lines[2], "b ") || !strings.Contains(lines[2], "load kubeconfig") {
		t.Errorf("output:\n%s", out)
	}
}
