package promtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A configuration Prometheus rejects makes Start fail at once with Prometheus' own error, not
// after the readiness timeout.
func TestStartReportsARejectedConfiguration(t *testing.T) {
	binary, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not on PATH: install Debian's prometheus package (`make testdeps` does as root)")
	}
	s := &Server{binary: binary, dir: t.TempDir(), host: "127.0.0.1", port: 1}
	if err := os.WriteFile(filepath.Join(s.dir, "prometheus.yml"), []byte("scrape_configs: [{job_name: x, no_such_field: 1}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = s.Start(t.Context())
	if err == nil {
		_ = s.Stop()
		t.Fatal("Prometheus started with a configuration it should reject")
	}
	if !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "no_such_field") {
		t.Errorf("Start: %v; want Prometheus' exit and its complaint about no_such_field", err)
	}
	if took := time.Since(start); took > readyTimeout/2 {
		t.Errorf("Start took %s to report Prometheus' exit", took)
	}
}
