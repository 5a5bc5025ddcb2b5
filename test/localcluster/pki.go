package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// certValidity is long enough for a demo left running over a weekend and short enough that nobody
// mistakes these files for production material.
const certValidity = 7 * 24 * time.Hour

// authority is the throwaway CA that signs every certificate of one local cluster. The apiserver
// trusts it for client certificates, so whoever holds its key is cluster-admin: it never leaves the
// cluster's work directory.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newAuthority(commonName string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: commonName}, key)
	if err != nil {
		return nil, fmt.Errorf("self-sign CA: %w", err)
	}
	return &authority{cert: cert, key: key}, nil
}

// keyPair is a PEM-encoded certificate and private key.
type keyPair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// issue signs a leaf certificate. Serving certificates carry IP and DNS SANs; client certificates
// carry the user in CN and groups in O, which is how the apiserver's x509 authenticator reads them.
func (a *authority) issue(commonName string, organizations []string, dnsNames []string, ips []net.IP, usage x509.ExtKeyUsage) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generate key for %s: %w", commonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return keyPair{}, fmt.Errorf("generate serial for %s: %w", commonName, err)
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName, Organization: organizations},
		NotBefore:    now.Add(-time.Minute), // tolerate small clock differences between processes
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate for %s: %w", commonName, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("encode key for %s: %w", commonName, err)
	}
	return keyPair{CertPEM: pemCert(der), KeyPEM: keyPEM}, nil
}

func (a *authority) certPEM() []byte { return pemCert(a.cert.Raw) }

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der})
}

// pkiFiles are the paths of the material written for one cluster.
type pkiFiles struct {
	CACert         string
	APIServerCert  string
	APIServerKey   string
	AdminCert      string
	AdminKey       string
	ServiceAcctKey string // private key that signs service-account tokens (kube-apiserver, KCM)
	ServiceAcctPub string // public key that verifies them
	AdminCertPEM   []byte
	AdminKeyPEM    []byte
	CACertPEM      []byte
	ca             *authority // kept in memory only, to sign webhook serving certificates
}

// writePKI generates the CA, the apiserver's serving certificate (for loopback and apiIPs), an
// admin client certificate in system:masters, and the service-account signing key, and writes them
// under dir with 0600 modes.
func writePKI(dir string, apiIPs ...net.IP) (*pkiFiles, error) {
	ca, err := newAuthority("daemonguard-localcluster-ca")
	if err != nil {
		return nil, err
	}
	serving, err := ca.issue("kube-apiserver", nil,
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		append([]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}, apiIPs...),
		x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	admin, err := ca.issue("daemonguard-admin", []string{"system:masters"}, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	saKeyPEM, err := keyutil.MarshalPrivateKeyToPEM(saKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account key: %w", err)
	}
	saPubPEM, err := encodePublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}

	f := &pkiFiles{
		CACert:         filepath.Join(dir, "ca.crt"),
		APIServerCert:  filepath.Join(dir, "apiserver.crt"),
		APIServerKey:   filepath.Join(dir, "apiserver.key"),
		AdminCert:      filepath.Join(dir, "admin.crt"),
		AdminKey:       filepath.Join(dir, "admin.key"),
		ServiceAcctKey: filepath.Join(dir, "sa.key"),
		ServiceAcctPub: filepath.Join(dir, "sa.pub"),
		AdminCertPEM:   admin.CertPEM,
		AdminKeyPEM:    admin.KeyPEM,
		CACertPEM:      ca.certPEM(),
		ca:             ca,
	}
	for path, data := range map[string][]byte{
		f.CACert:         f.CACertPEM,
		f.APIServerCert:  serving.CertPEM,
		f.APIServerKey:   serving.KeyPEM,
		f.AdminCert:      admin.CertPEM,
		f.AdminKey:       admin.KeyPEM,
		f.ServiceAcctKey: saKeyPEM,
		f.ServiceAcctPub: saPubPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return f, nil
}

func encodePublicKey(pub *rsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// WriteServingCert issues a serving certificate for 127.0.0.1 and localhost, signed by the
// cluster's CA, writes it to dir/tls.crt and dir/tls.key (the names controller-runtime's webhook
// server reads) and returns the CA bundle the API server must trust to call a webhook there.
func (c *Cluster) WriteServingCert(dir string) ([]byte, error) {
	pair, err := c.pki.ca.issue("daemonguard-webhook", nil, []string{"localhost"},
		[]net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), pair.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pair.KeyPEM, 0o600); err != nil {
		return nil, err
	}
	return c.pki.CACertPEM, nil
}
