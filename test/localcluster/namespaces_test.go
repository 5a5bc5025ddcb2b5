package localcluster

import (
	"testing"

	"github.com/daemonguard/daemonguard/webhook"
)

// NodeAgentLabels writes webhook.NodeAgentsLabel out; the namespaces the tests create must be the
// ones admission injects in.
func TestNodeAgentLabels(t *testing.T) {
	if len(NodeAgentLabels) != 1 || NodeAgentLabels[webhook.NodeAgentsLabel] != "true" {
		t.Fatalf("NodeAgentLabels = %v, want {%s: true}", NodeAgentLabels, webhook.NodeAgentsLabel)
	}
}
