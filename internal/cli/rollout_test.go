package cli

import (
	"strings"
	"testing"
)

// Argument and flag errors are reported before any cluster is contacted (the kubeconfig given
// does not exist). The commands against a cluster are tested in internal/rolloutcli.
func TestRolloutArgumentErrors(t *testing.T) {
	const noKubeconfig = "/nonexistent/kubeconfig"
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"status of a Deployment is refused": {
			args: []string{"rollout", "status", "deployment/web"}, wantErr: "works on DaemonSets only",
		},
		"history of a StatefulSet in TYPE NAME form is refused": {
			args: []string{"rollout", "history", "sts", "db"}, wantErr: "works on DaemonSets only",
		},
		"undo with an unknown --dry-run mode is refused": {
			args: []string{"rollout", "undo", "ds/agent", "--dry-run=maybe"}, wantErr: `--dry-run "maybe" is not one of none, client, server`,
		},
		"undo to a negative revision is refused": {
			args: []string{"rollout", "undo", "ds/agent", "--to-revision=-2"}, wantErr: "--to-revision must be a positive revision number",
		},
		"status with a negative timeout is refused": {
			args: []string{"rollout", "status", "ds/agent", "--timeout=-1s"}, wantErr: "--timeout must not be negative",
		},
		"a DaemonSet is required": {
			args: []string{"rollout", "pause"}, wantErr: "accepts between 1 and 2 arg(s)",
		},
		"a valid command reaches the kubeconfig": {
			args: []string{"rollout", "status", "ds/agent"}, wantErr: "load kubeconfig",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := run(t, "", append(tc.args, "--kubeconfig", noKubeconfig)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("%s: error %v, want %q", strings.Join(tc.args, " "), err, tc.wantErr)
			}
		})
	}
}

func TestRolloutHelpListsTheVerbs(t *testing.T) {
	out, err := run(t, "", "rollout", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"status", "history", "undo", "pause", "resume", "restart", "--namespace", "--context", "--kubeconfig"} {
		if !strings.Contains(out, verb) {
			t.Errorf("rollout --help lacks %s:\n%s", verb, out)
		}
	}
}
