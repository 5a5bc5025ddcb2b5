package install

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
)

// TestClosedEndpoints installs the chart and runs both components on the host with the chart's
// arguments and ServiceAccounts. Their metrics servers answer 401 without a token, 403 to a
// ServiceAccount the chart's ClusterRole <fullname>-metrics-reader is not bound to, and 200 to
// one it is bound to (metrics.reader.subjects): the chart's RBAC lets the processes review tokens
// and access. The webhook's metrics server passes the TLS verification of the chart's
// ServiceMonitor. No server negotiates HTTP/2 unless webhook.enableHTTP2 says so, and none
// completes a TLS 1.2 handshake.
func TestClosedEndpoints(t *testing.T) {
	r := installChart(t, "dg-closed", "webhook.inProcessInjection=false")
	web := r.runWebhook(r.webhookPort)
	ctl := r.runComponent("controller")
	webhookAddr := "127.0.0.1:" + strconv.Itoa(r.webhookPort)
	const stranger = "stranger" // a ServiceAccount bound to nothing
	ctx := context.Background()
	if err := harness.GrantGet(ctx, cluster.Client, r.Namespace, stranger); err != nil {
		t.Fatal(err)
	}
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the controller's certificate is self-signed; the answer is under test

	t.Run("metrics answer only an identity allowed to read them", func(t *testing.T) {
		tokens := map[string]struct {
			token string
			want  []int // the answers that pass
		}{
			"no token": {want: []int{http.StatusUnauthorized}},
			// controller-runtime's filter answers a token whose TokenReview comes back with an
			// error (a malformed one) with 500 "Authentication failed", one it merely does not
			// authenticate with 401: either way refused.
			"a token the API server does not know": {token: "not-a-token", want: []int{http.StatusUnauthorized, http.StatusInternalServerError}},
			"a ServiceAccount without the role":    {token: r.token(stranger), want: []int{http.StatusForbidden}},
			"a ServiceAccount bound to the role":   {token: r.token(scraper), want: []int{http.StatusOK}},
		}
		endpoints := map[string]struct {
			url    string
			verify *tls.Config
			// inBody is what a 200 answer holds.
			inBody string
		}{
			"webhook /metrics":       {url: "https://" + web.MetricsAddr + serving.MetricsPath, verify: r.webhookMetricsTLS(), inBody: "daemonguard_policy_set_healthy"},
			"webhook /policy-status": {url: "https://" + web.MetricsAddr + webhookserver.PolicyStatusPath, verify: r.webhookMetricsTLS(), inBody: `"modules"`},
			"controller /metrics":    {url: "https://" + ctl.MetricsAddr + serving.MetricsPath, verify: insecure, inBody: "rest_client_requests_total"},
		}
		for name, e := range endpoints {
			for who, tok := range tokens {
				t.Run(name+"/"+who, func(t *testing.T) {
					code, body, err := harness.Scrape(ctx, e.url, tok.token, e.verify)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Contains(tok.want, code) {
						t.Fatalf("HTTP %d, want one of %v: %s", code, tok.want, body)
					}
					if code == http.StatusOK && !bytes.Contains(body, []byte(e.inBody)) {
						t.Errorf("the answer lacks %s:\n%.500s", e.inBody, body)
					}
					if code != http.StatusOK && bytes.Contains(body, []byte(e.inBody)) {
						t.Errorf("HTTP %d, but the answer holds %s", code, e.inBody)
					}
				})
			}
		}
	})

	servers := map[string]string{
		"webhook":            webhookAddr,
		"webhook metrics":    web.MetricsAddr,
		"controller metrics": ctl.MetricsAddr,
	}
	t.Run("no HTTP/2 by default", func(t *testing.T) {
		for name, addr := range servers {
			if got := negotiated(t, addr, 0); got != "http/1.1" {
				t.Errorf("%s negotiated %q with a client offering h2 and http/1.1, want http/1.1", name, got)
			}
		}
	})
	t.Run("no TLS 1.2", func(t *testing.T) {
		for name, addr := range servers {
			if got := negotiated(t, addr, tls.VersionTLS12); got != "" {
				t.Errorf("%s completed a TLS 1.2 handshake (%s)", name, got)
			}
		}
	})
	t.Run("webhook.enableHTTP2 offers HTTP/2", func(t *testing.T) {
		r.helm("upgrade", r.Name, chartDir(t), "--namespace", r.Namespace, "--reuse-values", "--set", "webhook.enableHTTP2=true", "--wait", "--timeout", "3m")
		altPort := harness.FreePort(t)
		h2 := r.runWebhook(altPort)
		for name, addr := range map[string]string{"webhook": "127.0.0.1:" + strconv.Itoa(altPort), "webhook metrics": h2.MetricsAddr} {
			if got := negotiated(t, addr, 0); got != "h2" {
				t.Errorf("%s negotiated %q with HTTP/2 enabled, want h2", name, got)
			}
		}
	})
}

// negotiated completes a TLS handshake with addr offering h2 and http/1.1, up to TLS version
// maxVersion (0: Go's highest), and returns the protocol agreed; "" when the handshake fails.
func negotiated(t *testing.T, addr string, maxVersion uint16) string {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // the protocol and version are under test, not the certificate
		NextProtos:         []string{"h2", "http/1.1"}, MaxVersion: maxVersion,
	})
	if err != nil {
		t.Logf("handshake with %s (max version %x): %v", addr, maxVersion, err)
		return ""
	}
	defer conn.Close()
	return conn.ConnectionState().NegotiatedProtocol
}
