package cli

import (
	"strings"
	"testing"
)

// The root command carries internal/rolloutcli's `rollout` with every verb, plan included, and
// its connection flags. The verbs themselves are tested in internal/rolloutcli.
func TestRolloutHelpListsTheVerbs(t *testing.T) {
	out, err := run(t, "", "rollout", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, verb := range []string{"status", "history", "undo", "pause", "resume", "restart", "plan", "--namespace", "--context", "--kubeconfig"} {
		if !strings.Contains(out, verb) {
			t.Errorf("rollout --help lacks %s:\n%s", verb, out)
		}
	}
}
