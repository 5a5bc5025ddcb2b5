// Package serving decides how daemonguard's processes serve HTTPS: the webhook's admission
// endpoints, and the metrics server of both components (/metrics, and the webhook's
// /policy-status). Each is controller-runtime's own server; this package only sets their options:
//
//   - TLS 1.3 at least, and HTTP/1.1 only unless EnableHTTP2 (HTTP/2's rapid reset,
//     CVE-2023-44487, is why kubebuilder turns it off by default);
//   - the metrics server over TLS, every path behind Kubernetes authentication (TokenReview) and
//     authorization (SubjectAccessReview of a non-resource URL): controller-runtime's
//     filters.WithAuthenticationAndAuthorization, which its metrics server puts around /metrics
//     and every extra handler alike;
//   - a deadline on reading a request body (BodyReadTimeout), on top of controller-runtime's
//     http.Server limits (32 s for the headers and the TLS handshake, 90 s idle between
//     requests, 1 MiB of headers), which its servers do not let a caller change. 90 s idle is
//     also how long Go's HTTP clients, the API server's webhook client among them, keep an idle
//     connection: a shorter server timeout would close connections a client is about to reuse.
//
// The health probe server (/healthz, /readyz) is left as it is: plain HTTP for the kubelet.
package serving

import (
	"crypto/tls"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
)

// MetricsPath is where the metrics server serves Prometheus metrics. A scraper needs a
// ClusterRole granting get on it (a non-resource URL), and on every extra path it reads.
const MetricsPath = "/metrics"

// DefaultBodyReadTimeout bounds reading a request body. The API server sends an AdmissionReview
// at once after its headers, and the metrics paths take no body; what is slower than this is a
// client holding a connection and a goroutine open.
const DefaultBodyReadTimeout = 10 * time.Second

// Options say how a process serves.
type Options struct {
	// EnableHTTP2 offers HTTP/2 (ALPN h2) besides HTTP/1.1 on the webhook and metrics servers.
	EnableHTTP2 bool
	// BodyReadTimeout bounds reading a request's body, from the moment its headers were read; 0
	// means DefaultBodyReadTimeout. Only the read is bounded: a handler that has read its body
	// runs on for as long as it needs (the API server's webhook timeout bounds it).
	BodyReadTimeout time.Duration
}

// TLSOpts are the TLS settings of every server: TLS 1.3 or later, and the application protocols
// offered in the handshake (only "http/1.1" unless EnableHTTP2).
func (o Options) TLSOpts() []func(*tls.Config) {
	protos := []string{"http/1.1"}
	if o.EnableHTTP2 {
		protos = []string{"h2", "http/1.1"}
	}
	return []func(*tls.Config){func(c *tls.Config) {
		c.MinVersion = tls.VersionTLS13
		c.NextProtos = protos
	}}
}

// WebhookServer returns controller-runtime's webhook server with these TLS settings (before the
// caller's own TLSOpts), whose registered handlers read their bodies under BodyReadTimeout.
// Handlers added to its WebhookMux directly are not bounded.
func (o Options) WebhookServer(opts crwebhook.Options) crwebhook.Server {
	opts.TLSOpts = append(o.TLSOpts(), opts.TLSOpts...)
	return webhookServer{Server: crwebhook.NewServer(opts), limit: o.limitBodyRead}
}

type webhookServer struct {
	crwebhook.Server
	limit func(http.Handler) http.Handler
}

func (s webhookServer) Register(path string, hook http.Handler) {
	s.Server.Register(path, s.limit(hook))
}

// Metrics returns the options of a metrics server on bindAddress ("0" disables it) serving HTTPS
// with the certificate tls.crt/tls.key in certDir (reloaded when it changes), or with a
// self-signed certificate made at start when certDir is "" or holds none; every path answers 401
// without a valid bearer token and 403 unless the token's identity may get the path.
func (o Options) Metrics(bindAddress, certDir string) metricsserver.Options {
	return metricsserver.Options{
		BindAddress:   bindAddress,
		SecureServing: true,
		CertDir:       certDir,
		TLSOpts:       o.TLSOpts(),
		FilterProvider: func(cfg *rest.Config, client *http.Client) (metricsserver.Filter, error) {
			authorize, err := filters.WithAuthenticationAndAuthorization(cfg, client)
			if err != nil {
				return nil, err
			}
			return func(log logr.Logger, h http.Handler) (http.Handler, error) {
				h, err := authorize(log, h)
				if err != nil {
					return nil, err
				}
				return o.limitBodyRead(h), nil
			}, nil
		},
	}
}

// limitBodyRead bounds the reading of a request's body by BodyReadTimeout: a read past it fails,
// and so does the server's own read of what the handler left unread, which then closes the
// connection. net/http lifts the deadline once the body has been read to its end (its background
// read of the connection starts without one), so a handler that has read its body is not cut off
// however long it runs. Requests without a body are left alone: their background read has begun
// before the handler runs, and a deadline on it would cancel the request's context.
func (o Options) limitBodyRead(h http.Handler) http.Handler {
	timeout := o.BodyReadTimeout
	if timeout == 0 {
		timeout = DefaultBodyReadTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			// Fails only for a ResponseWriter that cannot set deadlines; the request is served
			// unbounded then, as without this.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(timeout))
		}
		h.ServeHTTP(w, r)
	})
}
