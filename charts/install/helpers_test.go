package install

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"sync"
	"testing"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

func chartDir(t *testing.T) string { return toolbin.RepoPath(t, "charts", "daemonguard") }

// buildHelm finds (or builds) helm v3 from the tools module, like the control plane's binaries.
var buildHelm = sync.OnceValues(func() (string, error) {
	b, err := toolbin.Ensure(context.Background(), os.Stderr, "helm")
	if err != nil {
		return "", err
	}
	return b.Path("helm"), nil
})

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
