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

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// daemonguardBinary builds cmd/daemonguard once per test run: the components run as the real
// binary, parsing the very arguments the chart renders.
func daemonguardBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := localcluster.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(cluster.Dir, "daemonguard")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/daemonguard")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New("go build ./cmd/daemonguard: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func decodePEMCert(b []byte) (*x509.Certificate, []byte, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no CERTIFICATE block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	return c, rest, err
}

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helmBinary is helm v3 built from the tools module like the control plane's binaries.
func helmBinary(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		var b *localcluster.Binaries
		b, helmErr = localcluster.EnsureBinaries(context.Background(), os.Stderr, "helm")
		if helmErr == nil {
			helmPath = b.Path("helm")
		}
	})
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
}
