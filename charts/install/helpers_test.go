package install

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/daemonguard/daemonguard/internal/localcluster"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func chartDir(t *testing.T) string {
	t.Helper()
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "charts", "daemonguard")
}

// buildDaemonguard builds cmd/daemonguard once per test run: the components run as the real
// binary, parsing the very arguments the chart renders.
var buildDaemonguard = sync.OnceValues(func() (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cluster.Dir, "daemonguard")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/daemonguard")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", errors.New("go build ./cmd/daemonguard: " + err.Error() + "\n" + string(out))
	}
	return bin, nil
})

// buildHelm finds (or builds) helm v3 from the tools module, like the control plane's binaries.
var buildHelm = sync.OnceValues(func() (string, error) {
	b, err := localcluster.EnsureBinaries(context.Background(), os.Stderr, "helm")
	if err != nil {
		return "", err
	}
	return b.Path("helm"), nil
})

func daemonguardBinary(t *testing.T) string { return mustPath(t, buildDaemonguard) }

func helmBinary(t *testing.T) string { return mustPath(t, buildHelm) }

func mustPath(t *testing.T, build func() (string, error)) string {
	t.Helper()
	path, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

func decodePEMCert(b []byte) (*x509.Certificate, []byte, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no CERTIFICATE block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	return c, rest, err
}
