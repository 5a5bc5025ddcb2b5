package webhook_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/webhook"
)

// TestOversizedReviewGets413: the real server, over TLS, answers a review body over the size
// limit with HTTP 413 naming the limit (the connection is not reset before the answer), and a
// body just under it with an ordinary AdmissionReview, on every endpoint and protocol: HTTP/1.1
// by default, also when the client would take HTTP/2, and HTTP/2 with --enable-http2.
func TestOversizedReviewGets413(t *testing.T) {
	w := startWebhook(t)
	h2URL, h2CA := startReplica(t, "http2", serving.Options{EnableHTTP2: true})
	client := func(ca []byte, h2 bool) *http.Client {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		// The API server's webhook client negotiates HTTP/2 when the server offers it.
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}}
	}
	servers := map[string]struct {
		url       string
		client    *http.Client
		wantMajor int // the HTTP version the answer comes in
	}{
		"HTTP/1.1": {url: w.URL, client: client(w.CABundle, false), wantMajor: 1},
		"HTTP/1.1 to a client that would take h2": {url: w.URL, client: client(w.CABundle, true), wantMajor: 1},
		"HTTP/2 with --enable-http2":              {url: h2URL, client: client(h2CA, true), wantMajor: 2},
	}
	// A review whose object never ends: malformed, so the answer is an error review, and as
	// large as wanted without the policies evaluating megabytes.
	body := func(size int) []byte {
		head := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","object":"`
		return []byte(head + strings.Repeat("a", size-len(head)))
	}
	sizes := map[string]struct {
		size     int
		chunked  bool // sent without a Content-Length
		wantHTTP int
	}{
		"9 MiB":                             {size: 9 << 20, wantHTTP: http.StatusRequestEntityTooLarge},
		"9 MiB, chunked":                    {size: 9 << 20, chunked: true, wantHTTP: http.StatusRequestEntityTooLarge},
		"the limit exactly":                 {size: webhook.ReviewBodyLimit, wantHTTP: http.StatusRequestEntityTooLarge},
		"one byte under the limit":          {size: webhook.ReviewBodyLimit - 1, wantHTTP: http.StatusOK},
		"one byte under the limit, chunked": {size: webhook.ReviewBodyLimit - 1, chunked: true, wantHTTP: http.StatusOK},
	}
	for proto, srv := range servers {
		for _, path := range []string{webhook.MutateDaemonSetPath, webhook.ValidateDaemonSetPath, webhook.MutatePodPath} {
			for name, tc := range sizes {
				t.Run(proto+path+"/"+name, func(t *testing.T) {
					var reader io.Reader = bytes.NewReader(body(tc.size))
					if tc.chunked {
						reader = struct{ io.Reader }{reader} // hides the length
					}
					req, err := http.NewRequest(http.MethodPost, srv.url+path, reader)
					if err != nil {
						t.Fatal(err)
					}
					req.Header.Set("Content-Type", "application/json")
					resp, err := srv.client.Do(req)
					if err != nil {
						t.Fatalf("no answer: %v", err)
					}
					defer resp.Body.Close()
					got, err := io.ReadAll(resp.Body)
					if err != nil {
						t.Fatalf("answer cut off: %v", err)
					}
					if resp.ProtoMajor != srv.wantMajor {
						t.Errorf("answered over %s, want HTTP/%d", resp.Proto, srv.wantMajor)
					}
					if resp.Close {
						t.Errorf("the server hung up after answering (Connection: close)")
					}
					if resp.StatusCode != tc.wantHTTP {
						t.Fatalf("HTTP %d, want %d: %s", resp.StatusCode, tc.wantHTTP, got)
					}
					if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
						t.Errorf("Content-Type %q, want application/json", ct)
					}
					if tc.wantHTTP == http.StatusRequestEntityTooLarge {
						var status metav1.Status
						if err := json.Unmarshal(got, &status); err != nil || status.Kind != "Status" {
							t.Fatalf("the answer is not a Status (%v): %s", err, got)
						}
						limit := strconv.Itoa(webhook.ReviewBodyLimit)
						if status.Code != http.StatusRequestEntityTooLarge || status.Reason != metav1.StatusReasonRequestEntityTooLarge || !strings.Contains(status.Message, limit) {
							t.Errorf("status %+v, want code 413, reason RequestEntityTooLarge and the limit %s in the message", status, limit)
						}
						return
					}
					var review admissionv1.AdmissionReview
					if err := json.Unmarshal(got, &review); err != nil || review.Response == nil || review.Response.Result == nil {
						t.Fatalf("not an AdmissionReview with a result (%v): %s", err, got)
					}
					if r := review.Response; r.Allowed || r.Result.Code != http.StatusBadRequest {
						t.Errorf("allowed=%v code=%d %q, want the malformed review refused with 400", r.Allowed, r.Result.Code, r.Result.Message)
					}
				})
			}
		}
	}
	// curl (7.88) discards an answer that a reset stream follows ("Stream error in the HTTP/2
	// framing layer"), which is what a body the server stops reading got.
	t.Run("curl over HTTP/2 with --enable-http2", func(t *testing.T) {
		if _, err := exec.LookPath("curl"); err != nil {
			t.Skip("no curl on PATH")
		}
		dir := t.TempDir()
		ca, data := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "review.json")
		if err := os.WriteFile(ca, h2CA, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(data, body(9<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("curl", "-sS", "--http2", "--cacert", ca, "-H", "Content-Type: application/json",
			"--data-binary", "@"+data, "-w", "\n%{http_code} %{http_version}", h2URL+webhook.MutatePodPath).CombinedOutput()
		if err != nil {
			t.Fatalf("curl: %v\n%s", err, out)
		}
		if !strings.HasSuffix(string(out), "413 2") || !strings.Contains(string(out), strconv.Itoa(webhook.ReviewBodyLimit)) {
			t.Errorf("curl got %s, want HTTP/2 413 naming the limit", out)
		}
	})
}
