package install

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"testing"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

func chartDir(t *testing.T) string { return toolbin.RepoPath(t, "charts", "daemonguard") }

func decodePEMCert(b []byte) (*x509.Certificate, []byte, error) {
	block, rest := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no CERTIFICATE block")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	return c, rest, err
}
