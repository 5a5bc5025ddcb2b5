package serving_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/test/webhookreg"
)

// endpoint writes a self-signed serving certificate for 127.0.0.1 as tls.crt and tls.key, and
// returns the folder, a pool that trusts it and a loopback port free right now.
func endpoint(t *testing.T) (certDir string, pool *x509.CertPool, port int) {
	t.Helper()
	crt, key, err := certutil.GenerateSelfSignedCertKeyWithFixtures("127.0.0.1", []net.IP{{127, 0, 0, 1}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(crt)
	port, err = webhookreg.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return dir, pool, port
}

// server is one of the two kinds of server the package configures.
type server struct {
	// start serves hook on path until the test ends and returns the server's address.
	start func(t *testing.T, o serving.Options, path string, hook http.Handler) string
}

var servers = map[string]server{
	"the webhook server": {start: startWebhook},
	"a metrics server":   {start: startMetrics},
}

func startWebhook(t *testing.T, o serving.Options, path string, hook http.Handler) string {
	t.Helper()
	dir, pool, port := endpoint(t)
	srv := o.WebhookServer(crwebhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	srv.Register(path, hook)
	return run(t, "127.0.0.1:"+strconv.Itoa(port), pool, srv.Start)
}

// startMetrics starts a metrics server whose filter would ask an API server that is not there:
// enough for what is decided before a token is reviewed (TLS, protocols, no token at all).
func startMetrics(t *testing.T, o serving.Options, path string, hook http.Handler) string {
	t.Helper()
	dir, pool, port := endpoint(t)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	opts := o.Metrics(addr, dir)
	opts.ExtraHandlers = map[string]http.Handler{path: hook}
	srv, err := metricsserver.NewServer(opts, &rest.Config{Host: "https://127.0.0.1:1"}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, addr, pool, srv.Start)
}

// run runs start until the test ends and waits until addr completes TLS handshakes.
func run(t *testing.T, addr string, pool *x509.CertPool, start func(context.Context) error) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	if err := webhookreg.WaitTLS(ctx, addr, pool, done); err != nil {
		t.Fatal(err)
	}
	return addr
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })

func TestTLSVersionsAndProtocols(t *testing.T) {
	cases := map[string]struct {
		opts serving.Options
		// client is what the client offers; zero versions are Go's defaults (TLS 1.2 to 1.3).
		maxVersion uint16
		protos     []string
		// wantErr says the handshake must fail; wantProto is what is negotiated otherwise.
		wantErr   bool
		wantProto string
	}{
		"HTTP/2 is not negotiated by default": {
			protos: []string{"h2", "http/1.1"}, wantProto: "http/1.1",
		},
		"a client that speaks only HTTP/2 gets no protocol agreed": {
			protos: []string{"h2"}, wantErr: true,
		},
		"HTTP/2 is negotiated when enabled": {
			opts: serving.Options{EnableHTTP2: true}, protos: []string{"h2", "http/1.1"}, wantProto: "h2",
		},
		"HTTP/1.1 still is when HTTP/2 is enabled": {
			opts: serving.Options{EnableHTTP2: true}, protos: []string{"http/1.1"}, wantProto: "http/1.1",
		},
		"a client limited to TLS 1.2 cannot handshake": {
			maxVersion: tls.VersionTLS12, protos: []string{"http/1.1"}, wantErr: true,
		},
	}
	for kind, s := range servers {
		for name, c := range cases {
			t.Run(kind+"/"+name, func(t *testing.T) {
				addr := s.start(t, c.opts, "/probe", ok)
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{
					InsecureSkipVerify: true, //nolint:gosec // the handshake's outcome is under test, not the certificate
					MaxVersion:         c.maxVersion, NextProtos: c.protos,
				})
				if c.wantErr {
					if err == nil {
						conn.Close()
						t.Fatalf("handshake succeeded (%s, TLS %x), want it refused", conn.ConnectionState().NegotiatedProtocol, conn.ConnectionState().Version)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				st := conn.ConnectionState()
				if st.NegotiatedProtocol != c.wantProto {
					t.Errorf("negotiated %q, want %q", st.NegotiatedProtocol, c.wantProto)
				}
				if st.Version != tls.VersionTLS13 {
					t.Errorf("TLS version %x, want TLS 1.3", st.Version)
				}
			})
		}
	}
}

func TestMetricsWithoutATokenAre401(t *testing.T) {
	addr := startMetrics(t, serving.Options{}, "/policy-status", ok)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the answer is under test
	}}
	for _, path := range []string{serving.MetricsPath, "/policy-status"} {
		resp, err := client.Get("https://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: HTTP %d, want 401", path, resp.StatusCode)
		}
	}
}

// TestBodyReadTimeout: a client that stops sending a body it announced gets its connection closed
// once BodyReadTimeout has passed; a handler that has read its body is not cut off by it.
func TestBodyReadTimeout(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for kind, s := range servers {
		t.Run(kind+"/a stalled body is abandoned", func(t *testing.T) {
			readErr := make(chan error, 1)
			addr := s.start(t, serving.Options{BodyReadTimeout: timeout}, "/probe", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.ReadAll(r.Body)
				readErr <- err
				if err != nil {
					http.Error(w, err.Error(), http.StatusRequestTimeout)
				}
			}))
			conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // not under test
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// No Authorization header: the metrics server answers 401 without reading the body,
			// then drains it itself, under the same deadline.
			sent := time.Now()
			if _, err := io.WriteString(conn, "POST /probe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"a\":"); err != nil {
				t.Fatal(err)
			}
			// The connection's end, within a bound far above the timeout: a server without one
			// would wait for the rest of the body for ever.
			if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			var netErr net.Error
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if errors.As(err, &netErr) && netErr.Timeout() {
				t.Fatalf("the server waited 30 s for the rest of the body without answering")
			}
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			rest, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if errors.As(err, &netErr) && netErr.Timeout() {
				t.Fatalf("the server kept the connection open for 30 s waiting for the body (HTTP %d %s)", resp.StatusCode, rest)
			}
			if elapsed := time.Since(sent); elapsed < timeout {
				t.Errorf("answered after %v, before the body read timeout of %v", elapsed, timeout)
			}
			if !resp.Close {
				t.Errorf("the server kept the connection after abandoning the body")
			}
			if kind == "the webhook server" {
				if err := <-readErr; !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("the handler's read ended with %v, want the deadline", err)
				}
				if resp.StatusCode != http.StatusRequestTimeout {
					t.Errorf("HTTP %d, want the handler's 408", resp.StatusCode)
				}
			}
		})
	}
	t.Run("a handler slower than the timeout after reading its body is not cut off", func(t *testing.T) {
		addr := startWebhook(t, serving.Options{BodyReadTimeout: timeout}, "/probe", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			// Working on the request: three times the timeout, unless the request is cancelled.
			select {
			case <-r.Context().Done():
				http.Error(w, "request cancelled: "+context.Cause(r.Context()).Error(), http.StatusServiceUnavailable)
			case <-time.After(3 * timeout):
				_, _ = w.Write(body)
			}
		}))
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // not under test
		}}
		resp, err := client.Post("https://"+addr+"/probe", "application/json", strings.NewReader(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(got) != `{"a":1}` {
			t.Errorf("HTTP %d %s, want 200 and the body back", resp.StatusCode, got)
		}
	})
}
