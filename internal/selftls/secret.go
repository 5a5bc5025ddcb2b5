package selftls

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
)

// Secret keys and annotations. tls.crt and tls.key follow kubernetes.io/tls, so the Secret can be
// mounted like any other serving certificate; ca.crt is the bundle the API server trusts.
const (
	KeyCABundle = "ca.crt"
	KeyCAKey    = "ca.key"
	// AnnotationRotateRequestedAt, set by an operator to an RFC 3339 time, forces a new CA and
	// serving certificate if the current ones are older:
	//   kubectl annotate secret NAME tls.daemonguard.io/rotate-requested-at=$(date -u +%FT%TZ) --overwrite
	AnnotationRotateRequestedAt = "tls.daemonguard.io/rotate-requested-at"
	// AnnotationBundlePublishedAt records when the current bundle was first seen in the webhook
	// configurations; the propagation grace counts from it.
	AnnotationBundlePublishedAt = "tls.daemonguard.io/bundle-published-at"
	// LabelManagedBy marks the Secret as written by daemonguard.
	LabelManagedBy = "app.kubernetes.io/managed-by"
)

// material is the Secret's content, parsed.
type material struct {
	state  State
	caKey  crypto.Signer
	bundle []byte // ca.crt as stored
}

// parseSecret reads a Secret (nil when it does not exist) into a State. Anything unparseable is
// treated as missing, so Decide replaces it; nothing here fails.
func parseSecret(s *corev1.Secret) material {
	var m material
	if s == nil {
		return m
	}
	m.bundle = s.Data[KeyCABundle]
	if cas, err := pki.DecodeX509CertificateSetBytes(m.bundle); err == nil {
		m.state.Bundle = cas
	}
	if key, err := pki.DecodePrivateKeyBytes(s.Data[KeyCAKey]); err == nil && len(m.state.Bundle) > 0 {
		if ok, _ := pki.PublicKeyMatchesCertificate(key.Public(), m.state.Bundle[0]); ok {
			m.caKey, m.state.CAKeyValid = key, true
		}
	}
	if leaf, err := pki.DecodeX509CertificateBytes(s.Data[corev1.TLSCertKey]); err == nil {
		m.state.Leaf = leaf
		if key, err := pki.DecodePrivateKeyBytes(s.Data[corev1.TLSPrivateKeyKey]); err == nil {
			m.state.LeafKeyValid, _ = pki.PublicKeyMatchesCertificate(key.Public(), leaf)
		}
	}
	m.state.RotateRequestedAt = parseTime(s.Annotations[AnnotationRotateRequestedAt])
	m.state.BundlePublishedAt = parseTime(s.Annotations[AnnotationBundlePublishedAt])
	return m
}

// parseTime reads a time annotation: what formatTime writes, or an operator's RFC 3339 time
// (`date -u +%FT%TZ`); the zero time when it is neither.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// formatTime writes a time annotation: RFC 3339 in UTC with nanoseconds, so that a grace
// counted from it is never cut short by rounding.
func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// render carries out a rotation step's certificate work and returns the Secret's new data and
// the value of AnnotationBundlePublishedAt ("" removes it).
func render(old *corev1.Secret, m material, p RotationStep, cfg Config, now time.Time) (map[string][]byte, string, error) {
	cfg = cfg.WithDefaults()
	data := map[string][]byte{}
	if old != nil {
		for k, v := range old.Data {
			data[k] = v
		}
	}
	publishedAt := ""
	if old != nil {
		publishedAt = old.Annotations[AnnotationBundlePublishedAt]
	}

	bundle := make([]*x509.Certificate, 0, len(p.KeepCAs)+1)
	caKey := m.caKey
	if p.NewCA {
		ca, key, err := newCA(now, cfg.CAValidity)
		if err != nil {
			return nil, "", err
		}
		bundle, caKey = append(bundle, ca), key
		keyPEM, err := pki.EncodePrivateKey(key, cmapi.PKCS8)
		if err != nil {
			return nil, "", fmt.Errorf("encode CA key: %w", err)
		}
		data[KeyCAKey] = keyPEM
	}
	for _, i := range p.KeepCAs {
		bundle = append(bundle, m.state.Bundle[i])
	}
	if p.BundleChanged(m.state) {
		pemBundle, err := encodeBundle(bundle)
		if err != nil {
			return nil, "", err
		}
		data[KeyCABundle] = pemBundle
		publishedAt = "" // the new bundle is not published yet
	}
	if p.IssueLeaf {
		certPEM, keyPEM, err := newLeaf(bundle[0], caKey, cfg, now)
		if err != nil {
			return nil, "", err
		}
		data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey] = certPEM, keyPEM
	}
	if p.ForgetPublished {
		publishedAt = ""
	}
	if p.RecordPublished {
		publishedAt = formatTime(now)
	}
	return data, publishedAt, nil
}

func encodeBundle(cas []*x509.Certificate) ([]byte, error) {
	var b bytes.Buffer
	for _, ca := range cas {
		p, err := pki.EncodeX509(ca)
		if err != nil {
			return nil, fmt.Errorf("encode CA: %w", err)
		}
		b.Write(p)
	}
	return b.Bytes(), nil
}

// newCA creates a self-signed CA. NotBefore is now, not backdated: a rotation request is compared
// with it, and a backdated CA would look older than the request that created it.
func newCA(now time.Time, validity time.Duration) (*x509.Certificate, crypto.Signer, error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	// A nil SerialNumber makes crypto/x509 draw a random 128-bit one.
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "daemonguard-webhook-ca", Organization: []string{"daemonguard"}},
		NotBefore:             now,
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	_, ca, err := pki.SignCertificate(tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("sign CA: %w", err)
	}
	return ca, key, nil
}

func newLeaf(ca *x509.Certificate, caKey crypto.Signer, cfg Config, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := pki.GenerateECPrivateKey(pki.ECCurve256)
	if err != nil {
		return nil, nil, fmt.Errorf("generate serving key: %w", err)
	}
	notAfter := now.Add(cfg.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	commonName := ""
	if len(cfg.DNSNames) > 0 {
		commonName = cfg.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"daemonguard"}},
		DNSNames:              cfg.DNSNames,
		IPAddresses:           cfg.IPAddresses,
		NotBefore:             now,
		NotAfter:              notAfter,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	certPEM, _, err = pki.SignCertificate(tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("sign serving certificate: %w", err)
	}
	keyPEM, err = pki.EncodePrivateKey(key, cmapi.PKCS8)
	if err != nil {
		return nil, nil, fmt.Errorf("encode serving key: %w", err)
	}
	return certPEM, keyPEM, nil
}
