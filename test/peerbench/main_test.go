package peerbench

import (
	"os"
	"testing"

	"github.com/daemonguard/daemonguard/test/loadgen"
)

// TestMain lets loadgen.StartServerProcesses run this test binary as a webhook process.
func TestMain(m *testing.M) {
	loadgen.ServeChildIfAsked()
	os.Exit(m.Run())
}
