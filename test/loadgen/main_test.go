package loadgen

import (
	"os"
	"testing"
)

// TestMain lets StartServerProcesses run this test binary as a server child.
func TestMain(m *testing.M) {
	ServeChildIfAsked()
	os.Exit(m.Run())
}
