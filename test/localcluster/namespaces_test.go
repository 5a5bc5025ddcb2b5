package localcluster

import (
	"testing"

	"github.com/daemonguard/daemonguard/internal/admission"
)

// NodeAgentLabels writes admission.NodeAgentsLabel out; the namespaces the tests create must be the
// ones admission injects in.
func TestNodeAgentLabels(t *testing.T) {
	if len(NodeAgentLabels) != 1 || NodeAgentLabels[admission.NodeAgentsLabel] != "true" {
		t.Fatalf("NodeAgentLabels = %v, want {%s: true}", NodeAgentLabels, admission.NodeAgentsLabel)
	}
}
