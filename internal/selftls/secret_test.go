package selftls

import (
	"bytes"
	"crypto/x509"
	"slices"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/cert-manager/cert-manager/pkg/util/pki"
	corev1 "k8s.io/api/core/v1"
)

// secretData builds a Secret from key/value pairs of data.
func secretData(kv ...string) *corev1.Secret {
	s := &corev1.Secret{Data: map[string][]byte{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.Data[kv[i]] = []byte(kv[i+1])
	}
	return s
}

func TestParseSecretReportsWhatItCannotUseAsMissing(t *testing.T) {
	now := testNow
	ca := newTestCA(t, now, madeAgo(10*day))
	other := newTestCA(t, now, madeAgo(day))
	leaf := newTestLeaf(t, ca, now, issuedAgo(day))
	otherLeaf := newTestLeaf(t, ca, now, issuedAgo(day))
	edKey, err := pki.GenerateEd25519PrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	edKeyPEM, err := pki.EncodePrivateKey(edKey, cmapi.PKCS8)
	if err != nil {
		t.Fatal(err)
	}
	const (
		garbageCert = "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
		garbageKey  = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"
	)
	bundle, caKey := string(pemOf(t, ca.cert)), string(ca.keyPEM(t))
	valid := func() *corev1.Secret {
		return secretData(KeyCABundle, bundle, KeyCAKey, caKey, corev1.TLSCertKey, string(leaf.certPEM), corev1.TLSPrivateKeyKey, string(leaf.keyPEM))
	}
	withAnnotations := func(s *corev1.Secret, kv ...string) *corev1.Secret {
		s.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
		return s
	}

	tests := map[string]struct {
		// secret is what the API server returned; nil when it does not exist.
		secret *corev1.Secret
		// cas is how many CAs the bundle holds.
		cas int
		// caKey, leaf and leafKey say ca.key matches Bundle[0], tls.crt parses and tls.key matches it.
		caKey, leaf, leafKey bool
		// publishedAt and rotateRequestedAt are the annotations' times; zero when absent or unreadable.
		publishedAt, rotateRequestedAt time.Time
	}{
		"a Secret that does not exist holds nothing": {},
		"a Secret without data holds nothing":        {secret: &corev1.Secret{}},
		"empty values hold nothing": {
			secret: secretData(KeyCABundle, "", KeyCAKey, "", corev1.TLSCertKey, "", corev1.TLSPrivateKeyKey, ""),
		},
		"text that is not PEM holds nothing, and unreadable annotations are no times": {
			secret: withAnnotations(secretData(KeyCABundle, "hello", KeyCAKey, "\x00\x01", corev1.TLSCertKey, "-----BEGIN", corev1.TLSPrivateKeyKey, "{}"),
				AnnotationBundlePublishedAt, "yesterday", AnnotationRotateRequestedAt, "2026-13-45"),
		},
		"PEM blocks holding garbage hold nothing": {
			secret: secretData(KeyCABundle, garbageCert, KeyCAKey, garbageKey, corev1.TLSCertKey, garbageCert, corev1.TLSPrivateKeyKey, garbageKey),
		},
		"a bundle with a good CA and a garbage block is unreadable as a whole": {
			secret: secretData(KeyCABundle, bundle+garbageCert, KeyCAKey, caKey),
		},
		"a CA key without a bundle does not count": {
			secret: secretData(KeyCAKey, caKey),
		},
		"the key of another CA does not match": {
			secret: secretData(KeyCABundle, bundle, KeyCAKey, string(other.keyPEM(t))),
			cas:    1,
		},
		"a CA key of another algorithm does not match": {
			secret: secretData(KeyCABundle, bundle, KeyCAKey, string(edKeyPEM)),
			cas:    1,
		},
		"the key of another certificate does not match the serving certificate": {
			secret: secretData(corev1.TLSCertKey, string(leaf.certPEM), corev1.TLSPrivateKeyKey, string(otherLeaf.keyPEM)),
			leaf:   true,
		},
		"a serving certificate and key in each other's place hold nothing": {
			secret: secretData(corev1.TLSCertKey, string(leaf.keyPEM), corev1.TLSPrivateKeyKey, string(leaf.certPEM)),
		},
		"the CA key in the serving key's place does not match": {
			secret: secretData(KeyCABundle, bundle, KeyCAKey, caKey, corev1.TLSCertKey, string(leaf.certPEM), corev1.TLSPrivateKeyKey, caKey),
			cas:    1, caKey: true, leaf: true,
		},
		"a complete Secret holds everything, annotations included": {
			secret: withAnnotations(valid(),
				AnnotationBundlePublishedAt, "2026-02-28T12:00:00Z", AnnotationRotateRequestedAt, "2026-02-27T08:30:00Z"),
			cas: 1, caKey: true, leaf: true, leafKey: true,
			publishedAt:       time.Date(2026, time.February, 28, 12, 0, 0, 0, time.UTC),
			rotateRequestedAt: time.Date(2026, time.February, 27, 8, 30, 0, 0, time.UTC),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := parseSecret(tc.secret)
			st := m.state
			if len(st.Bundle) != tc.cas || st.CAKeyValid != tc.caKey || (st.Leaf != nil) != tc.leaf || st.LeafKeyValid != tc.leafKey {
				t.Errorf("got %d CAs, CA key valid %v, leaf %v, leaf key valid %v; want %d, %v, %v, %v",
					len(st.Bundle), st.CAKeyValid, st.Leaf != nil, st.LeafKeyValid, tc.cas, tc.caKey, tc.leaf, tc.leafKey)
			}
			if (m.caKey != nil) != st.CAKeyValid {
				t.Errorf("CA key kept = %v with CAKeyValid %v", m.caKey != nil, st.CAKeyValid)
			}
			if !st.BundlePublishedAt.Equal(tc.publishedAt) || !st.RotateRequestedAt.Equal(tc.rotateRequestedAt) {
				t.Errorf("published at %s, rotation requested at %s; want %s, %s", st.BundlePublishedAt, st.RotateRequestedAt, tc.publishedAt, tc.rotateRequestedAt)
			}
			// Whatever is missing, Decide replaces it, and render can carry out the step.
			p := Decide(st, testConfig(), now)
			if !st.CAKeyValid && !p.NewCA {
				t.Errorf("without a usable CA, the step makes none: %+v", p)
			}
			if !st.LeafKeyValid && !p.IssueLeaf {
				t.Errorf("without a usable serving certificate, the step issues none: %+v", p)
			}
			next := parseSecret(rendered(t, tc.secret, m, p, testConfig(), now)).state
			if !next.CAKeyValid || next.Leaf == nil || !next.LeafKeyValid {
				t.Errorf("after the step, CA key valid %v, leaf %v, leaf key valid %v", next.CAKeyValid, next.Leaf != nil, next.LeafKeyValid)
			}
		})
	}
}

func TestRenderRoundTrips(t *testing.T) {
	now, cfg := testNow, testConfig()
	first := newTestCA(t, now, madeAgo(5*time.Minute))
	second := newTestCA(t, now, madeAgo(100*day))
	third := newTestCA(t, now, madeAgo(250*day))
	secondLeaf := newTestLeaf(t, second, now, issuedAgo(day))
	firstLeaf := newTestLeaf(t, first, now, issuedAgo(2*time.Minute))
	// secretOf holds cas, the key of the first, and leaf.
	secretOf := func(leaf testLeaf, cas ...testCA) *corev1.Secret {
		var certs []*x509.Certificate
		for _, c := range cas {
			certs = append(certs, c.cert)
		}
		s := secretData(KeyCABundle, string(pemOf(t, certs...)), KeyCAKey, string(cas[0].keyPEM(t)),
			corev1.TLSCertKey, string(leaf.certPEM), corev1.TLSPrivateKeyKey, string(leaf.keyPEM))
		s.Data["extra"] = []byte("kept")
		return s
	}
	const newCA = "new"

	tests := map[string]struct {
		// secret is the Secret before the step.
		secret *corev1.Secret
		// step is what apply carries out.
		step RotationStep
		// bundle is the wanted bundle, newest first: a CA fixture, or newCA for the one the step makes.
		bundle []any
		// signer is the wanted signer of the serving certificate, as in bundle.
		signer any
		// sameBundleBytes says ca.crt must keep its exact bytes, which the webhook configurations are
		// compared with.
		sameBundleBytes bool
	}{
		"a first step writes a CA and a serving certificate from it": {
			step:   RotationStep{NewCA: true, IssueLeaf: true},
			bundle: []any{newCA},
			signer: newCA,
		},
		"a new CA goes in front of the kept one and the serving certificate stays": {
			secret: secretOf(secondLeaf, second),
			step:   RotationStep{NewCA: true, KeepCAs: []int{0}},
			bundle: []any{newCA, second},
			signer: second,
		},
		"a serving certificate is issued from the newest CA and both CAs stay": {
			secret:          secretOf(secondLeaf, first, second),
			step:            RotationStep{KeepCAs: []int{0, 1}, IssueLeaf: true},
			bundle:          []any{first, second},
			signer:          first,
			sameBundleBytes: true,
		},
		"an older CA leaves the bundle": {
			secret: secretOf(firstLeaf, first, second),
			step:   RotationStep{KeepCAs: []int{0}},
			bundle: []any{first},
			signer: first,
		},
		"a CA in the middle leaves and the others keep their order": {
			secret: secretOf(firstLeaf, first, second, third),
			step:   RotationStep{KeepCAs: []int{0, 2}},
			bundle: []any{first, third},
			signer: first,
		},
		"a new CA and serving certificate replace everything": {
			secret: secretOf(secondLeaf, second, third),
			step:   RotationStep{NewCA: true, IssueLeaf: true},
			bundle: []any{newCA},
			signer: newCA,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := parseSecret(tc.secret)
			out := rendered(t, tc.secret, m, tc.step, cfg, now)
			st := parseSecret(out).state

			want := func(x any) *x509.Certificate {
				if c, ok := x.(testCA); ok {
					return c.cert
				}
				return nil // the new CA
			}
			if len(st.Bundle) != len(tc.bundle) {
				t.Fatalf("bundle holds %d CAs, want %d", len(st.Bundle), len(tc.bundle))
			}
			for i, x := range tc.bundle {
				switch w := want(x); {
				case w == nil && (!st.Bundle[i].NotBefore.Equal(now) || !st.Bundle[i].IsCA || slices.ContainsFunc(m.state.Bundle, st.Bundle[i].Equal)):
					t.Errorf("CA %d is not a CA made now: from %s, IsCA %v", i, st.Bundle[i].NotBefore, st.Bundle[i].IsCA)
				case w != nil && !st.Bundle[i].Equal(w):
					t.Errorf("CA %d is %s, want %s", i, st.Bundle[i].SerialNumber, w.SerialNumber)
				}
			}
			if !st.CAKeyValid || st.Leaf == nil || !st.LeafKeyValid {
				t.Fatalf("CA key valid %v, leaf %v, leaf key valid %v; want all", st.CAKeyValid, st.Leaf != nil, st.LeafKeyValid)
			}
			signer := want(tc.signer)
			if signer == nil {
				signer = st.Bundle[0]
			}
			if !signedBy(st.Leaf, signer) {
				t.Errorf("the serving certificate is not signed by the wanted CA")
			}
			if tc.step.IssueLeaf && !st.Leaf.NotBefore.Equal(now) {
				t.Errorf("the issued certificate starts at %s, want now", st.Leaf.NotBefore)
			}
			if !tc.step.IssueLeaf && !bytes.Equal(out.Data[corev1.TLSCertKey], tc.secret.Data[corev1.TLSCertKey]) {
				t.Errorf("the serving certificate changed though the step issues none")
			}
			if usable, why := usableLeaf(st, cfg, now); !usable {
				t.Errorf("the serving certificate is not usable: %s", why)
			}
			roots := x509.NewCertPool()
			for _, ca := range st.Bundle {
				roots.AddCert(ca)
			}
			for _, name := range append(slices.Clone(cfg.DNSNames), cfg.IPAddresses[0].String()) {
				if _, err := st.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name, CurrentTime: now}); err != nil {
					t.Errorf("the serving certificate does not verify for %s against the bundle: %v", name, err)
				}
			}
			if tc.sameBundleBytes && !bytes.Equal(out.Data[KeyCABundle], tc.secret.Data[KeyCABundle]) {
				t.Errorf("ca.crt was rewritten though the bundle did not change")
			}
			if tc.secret != nil && string(out.Data["extra"]) != "kept" {
				t.Errorf("other data of the Secret was lost")
			}
		})
	}
}

func TestRenderStartsTheGraceClockOnlyForThePublishedBundle(t *testing.T) {
	now := testNow
	earlier := now.Add(-time.Hour)
	first := newTestCA(t, now, madeAgo(time.Hour))
	second := newTestCA(t, now, madeAgo(100*day))
	leaf := newTestLeaf(t, second, now, issuedAgo(day))
	secret := func(publishedAt time.Time) *corev1.Secret {
		s := secretData(KeyCABundle, string(pemOf(t, first.cert, second.cert)), KeyCAKey, string(first.keyPEM(t)),
			corev1.TLSCertKey, string(leaf.certPEM), corev1.TLSPrivateKeyKey, string(leaf.keyPEM))
		s.Annotations = map[string]string{AnnotationRotateRequestedAt: "2026-01-01T00:00:00Z"}
		if !publishedAt.IsZero() {
			s.Annotations[AnnotationBundlePublishedAt] = publishedAt.Format(time.RFC3339)
		}
		return s
	}

	tests := map[string]struct {
		// secret is the Secret before the step.
		secret *corev1.Secret
		// step is what apply carries out.
		step RotationStep
		// publishedAt is the wanted BundlePublishedAt after the step; zero when cleared.
		publishedAt time.Time
	}{
		"a first step leaves the bundle unpublished": {
			step: RotationStep{NewCA: true, IssueLeaf: true},
		},
		"a new CA clears the published time": {
			secret: secret(earlier),
			step:   RotationStep{NewCA: true, KeepCAs: []int{0, 1}},
		},
		"a CA leaving the bundle clears the published time": {
			secret: secret(earlier),
			step:   RotationStep{KeepCAs: []int{0}},
		},
		"a serving certificate issued under the same bundle keeps the published time": {
			secret:      secret(earlier),
			step:        RotationStep{KeepCAs: []int{0, 1}, IssueLeaf: true},
			publishedAt: earlier,
		},
		"recording the publication sets the published time to now": {
			secret:      secret(time.Time{}),
			step:        RotationStep{KeepCAs: []int{0, 1}, RecordPublished: true},
			publishedAt: now,
		},
		"recording the publication with a serving certificate sets both": {
			secret:      secret(time.Time{}),
			step:        RotationStep{KeepCAs: []int{0, 1}, IssueLeaf: true, RecordPublished: true},
			publishedAt: now,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := rendered(t, tc.secret, parseSecret(tc.secret), tc.step, testConfig(), now)
			st := parseSecret(out).state
			if !st.BundlePublishedAt.Equal(tc.publishedAt) {
				t.Errorf("BundlePublishedAt = %s, want %s", st.BundlePublishedAt, tc.publishedAt)
			}
			if _, ok := out.Annotations[AnnotationBundlePublishedAt]; ok == tc.publishedAt.IsZero() {
				t.Errorf("annotations %v, want the published time present = %v", out.Annotations, !tc.publishedAt.IsZero())
			}
			if tc.secret != nil && !st.RotateRequestedAt.Equal(parseSecret(tc.secret).state.RotateRequestedAt) {
				t.Errorf("the rotation request was lost")
			}
		})
	}
}

// A serving certificate never outlives the CA that signed it.
func TestNewLeafEndsWithItsCA(t *testing.T) {
	cfg := testConfig()
	ca := newTestCA(t, testNow, madeAgo(290*day)) // ends in 10 days, before the 30 days a certificate lives
	leaf := newTestLeaf(t, ca, testNow)
	if !leaf.cert.NotAfter.Equal(ca.cert.NotAfter) {
		t.Errorf("the certificate ends %s, want the CA's end %s", leaf.cert.NotAfter, ca.cert.NotAfter)
	}
	young := newTestCA(t, testNow)
	if got := newTestLeaf(t, young, testNow).cert.NotAfter; !got.Equal(testNow.Add(cfg.CertValidity)) {
		t.Errorf("the certificate from a young CA ends %s, want %s", got, testNow.Add(cfg.CertValidity))
	}
}
