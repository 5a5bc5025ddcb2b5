package rolloutcli

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
