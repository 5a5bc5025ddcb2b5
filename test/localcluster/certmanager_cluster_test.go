package localcluster_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

var certificates = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

// The chart's cert-manager TLS mode, end to end on cert-manager's real controllers: a selfSigned
// Issuer signs a CA Certificate, a CA Issuer made from its Secret signs the serving Certificate,
// and the cainjector copies the CA into every webhook of a configuration annotated with
// cert-manager.io/inject-ca-from.
func TestCertManagerIssuesServingCertificateAndInjectsCA(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	cm, err := cluster.StartCertManager(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cm.Stop)
	ns := cluster.NewTestNamespace(t)

	apply(t, ns, fmt.Sprintf(`
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: selfsigned}
spec: {selfSigned: {}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: ca}
spec:
  isCA: true
  commonName: daemonguard-test-ca
  secretName: ca
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: selfsigned, kind: Issuer, group: cert-manager.io}
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata: {name: ca}
spec: {ca: {secretName: ca}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata: {name: serving}
spec:
  secretName: serving
  dnsNames: [daemonguard-webhook.%s.svc, localhost]
  ipAddresses: [127.0.0.1]
  usages: [server auth, digital signature]
  privateKey: {algorithm: ECDSA, size: 256}
  issuerRef: {name: ca, kind: Issuer, group: cert-manager.io}
`, ns))

	dyn, err := dynamic.NewForConfig(cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ca", "serving"} {
		waitCertificateReady(t, dyn, ns, name)
	}
	secret, err := cluster.Client.CoreV1().Secrets(ns).Get(ctx, "serving", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey, "ca.crt"} {
		if len(secret.Data[key]) == 0 {
			t.Fatalf("Secret %s/serving has no %s (keys: %v)", ns, key, keysOf(secret.Data))
		}
	}
	caPEM := secret.Data["ca.crt"]
	ca := parseCert(t, caPEM)
	if !ca.IsCA || ca.Subject.CommonName != "daemonguard-test-ca" || ca.CheckSignatureFrom(ca) != nil {
		t.Errorf("ca.crt is not the self-signed test CA: subject %q, isCA %v", ca.Subject, ca.IsCA)
	}
	leaf := parseCert(t, secret.Data[corev1.TLSCertKey])
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, name := range []string{"localhost", "127.0.0.1", "daemonguard-webhook." + ns + ".svc"} {
		opts := x509.VerifyOptions{DNSName: name, Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		if _, err := leaf.Verify(opts); err != nil {
			t.Errorf("serving certificate does not verify for %s against ca.crt: %v", name, err)
		}
	}
	if !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Errorf("serving certificate IP SANs are %v, want 127.0.0.1", leaf.IPAddresses)
	}
	// The key in the Secret belongs to the certificate: a real TLS handshake on 127.0.0.1 that
	// trusts only ca.crt succeeds.
	pair, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatalf("tls.crt and tls.key do not form a key pair: %v", err)
	}
	handshake(t, pair, pool)

	// The cainjector fills in every webhook's caBundle from the Certificate's Secret.
	vwc := validatingWebhookConfiguration(t, ns, ns+"/serving", "first.daemonguard.test", "second.daemonguard.test")
	cluster.WaitFor(t, time.Minute, "caBundle injected into "+vwc, func(ctx context.Context) (bool, string) {
		got, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwc, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, w := range got.Webhooks {
			if !bytes.Equal(w.ClientConfig.CABundle, caPEM) {
				return false, fmt.Sprintf("webhook %s has a caBundle of %d bytes, want ca.crt (%d bytes)", w.Name, len(w.ClientConfig.CABundle), len(caPEM))
			}
		}
		return true, ""
	})
}

func apply(t *testing.T, ns, manifest string) {
	t.Helper()
	args := []string{"apply", "-f", "-"}
	if ns != "" {
		args = append(args, "-n", ns)
	}
	clustertest.Kubectl(t, cluster, manifest, args...)
}

func waitCertificateReady(t *testing.T, dyn dynamic.Interface, ns, name string) {
	t.Helper()
	cluster.WaitFor(t, time.Minute, "Certificate "+name+" Ready", func(ctx context.Context) (bool, string) {
		cert, err := dyn.Resource(certificates).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(cert.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Ready" {
				return m["status"] == "True", fmt.Sprintf("Ready=%v: %v", m["status"], m["message"])
			}
		}
		return false, "no Ready condition yet"
	})
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("no PEM certificate in %q", data)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func keysOf(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func handshake(t *testing.T, pair tls.Certificate, roots *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	defer srv.Close()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := client.Get(srv.URL) // https://127.0.0.1:port: verified against the IP SAN
	if err != nil {
		t.Fatalf("TLS handshake with the issued certificate: %v", err)
	}
	resp.Body.Close()
}

// validatingWebhookConfiguration creates a configuration, named after the test namespace, whose
// webhooks never match a request, annotated to have the CA of certificate (namespace/name)
// injected. It is deleted when the test ends.
func validatingWebhookConfiguration(t *testing.T, name, certificate string, webhooks ...string) string {
	t.Helper()
	manifest := fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: %s
  annotations: {cert-manager.io/inject-ca-from: %s}
webhooks:
`, name, certificate)
	for _, w := range webhooks {
		manifest += fmt.Sprintf(`- name: %s
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig: {url: "https://127.0.0.1:9/validate"}
  rules: [{apiGroups: [daemonguard.test], apiVersions: [v1], resources: [nothings], operations: [CREATE]}]
`, w)
	}
	apply(t, "", manifest)
	t.Cleanup(func() {
		_ = cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}
