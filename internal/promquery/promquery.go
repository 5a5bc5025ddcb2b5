// Package promquery measures the rollout controller's analysis gates: it runs each gate's PromQL
// queries as instant queries against Prometheus' HTTP API, with Prometheus' own Go client, and
// turns every answer into one value per node, or into a sentence that says why there is none.
//
// What it returns is written into a tenant's DaemonSet status, conditions and Events, so it
// returns nothing of Prometheus' but the values of the nodes asked about: a query outside a
// namespace marked for node agents reads its own namespace's series only (internal/rolloutanalysis.Scope),
// other series' label sets and Prometheus' own error text never appear in a message (an error
// says its kind), and every answer is bounded (queries in flight, bytes read, series kept).
package promquery

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
)

// DefaultTimeout bounds one query when Options.Timeout is not set.
const DefaultTimeout = 10 * time.Second

// Bounds of the queries, per process and per answer.
const (
	// DefaultMaxInFlight is how many queries one process has at Prometheus at once when
	// Options.MaxInFlight is not set; the others wait for a slot, within their reconcile.
	DefaultMaxInFlight = 4
	// DefaultMaxResponseBytes bounds the body of one answer read when Options.MaxResponseBytes
	// is not set: about 20,000 series of `sum by (node)`, and a few times that in memory once
	// decoded.
	DefaultMaxResponseBytes = 4 << 20
	// MinSeriesLimit is the fewest series an answer may have; above it, twice the nodes the query
	// selects (SeriesLimit).
	MinSeriesLimit = 100
)

// SeriesLimit is the most series an answer about nodes may have: one per node is what a gate
// asks for, so twice the nodes, and at least MinSeriesLimit, leaves room for a query that reads
// a few more, and refuses one that reads a whole cluster's worth of series.
func SeriesLimit(nodes int) int { return max(2*nodes, MinSeriesLimit) }

// NotConfigured is every measurement's Err when no Prometheus address is set: the gate's
// measurement is then inconclusive, and the rollout waits rather than going on unmeasured.
const NotConfigured = KindNotConfigured + ": no Prometheus is configured: set --prometheus-address (chart value controller.prometheus.address)"

// Options say where Prometheus is and how to reach it.
type Options struct {
	// Address is the base URL of Prometheus' HTTP API, e.g. https://prometheus.monitoring:9090;
	// "" when none is configured.
	Address string
	// CAFile verifies Prometheus' serving certificate; "" uses the system's roots. It is read
	// again whenever it changes, so that a rotated CA needs no restart.
	CAFile string
	// BearerTokenFile holds the token sent as "Authorization: Bearer"; "" sends none. It is read
	// on every request, so that a rotated token needs no restart.
	BearerTokenFile string
	// Timeout bounds each query, on the client and as Prometheus' own evaluation timeout;
	// 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxInFlight bounds the queries at Prometheus at once, over every gate of every DaemonSet;
	// 0 means DefaultMaxInFlight.
	MaxInFlight int
	// MaxResponseBytes bounds the bytes read of one answer; 0 means DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// NamespaceLabel is the series label that names a namespace, which a query of a DaemonSet
	// outside the namespaces marked for node agents must match (rolloutanalysis.Scope); "" means
	// rolloutanalysis.DefaultNamespaceLabel.
	NamespaceLabel string
}

// Client measures analysis gates against one Prometheus. Its zero value and a Client made
// without an address answer every measurement with NotConfigured.
type Client struct {
	api      promv1.API // nil without an address
	address  string
	timeout  time.Duration
	label    string
	slots    chan struct{} // a query holds one while at Prometheus
	maxBytes int64
}

// New checks opts and makes the client. The files must be readable now: a mount that is missing
// is a setup mistake to report at start, not a rollout that waits for an hour to say so.
func New(opts Options) (*Client, error) {
	switch {
	case opts.Timeout < 0:
		return nil, fmt.Errorf("Prometheus timeout %s: must not be negative", opts.Timeout)
	case opts.MaxInFlight < 0:
		return nil, fmt.Errorf("Prometheus queries in flight %d: must not be negative", opts.MaxInFlight)
	case opts.MaxResponseBytes < 0:
		return nil, fmt.Errorf("Prometheus answer bound %d: must not be negative", opts.MaxResponseBytes)
	case opts.NamespaceLabel != "" && !rolloutanalysis.ValidLabelName(opts.NamespaceLabel):
		return nil, fmt.Errorf("Prometheus namespace label %q: must be a label name such as %s", opts.NamespaceLabel, rolloutanalysis.DefaultNamespaceLabel)
	}
	c := &Client{timeout: cmp.Or(opts.Timeout, DefaultTimeout), label: cmp.Or(opts.NamespaceLabel, rolloutanalysis.DefaultNamespaceLabel),
		slots: make(chan struct{}, cmp.Or(opts.MaxInFlight, DefaultMaxInFlight)), maxBytes: cmp.Or(opts.MaxResponseBytes, DefaultMaxResponseBytes)}
	if opts.Address == "" {
		if opts.CAFile != "" || opts.BearerTokenFile != "" {
			return nil, errors.New("a Prometheus CA file or bearer token file is set without a Prometheus address")
		}
		return c, nil
	}
	u, err := url.Parse(opts.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("Prometheus address %q: want an http or https URL such as https://prometheus.monitoring:9090", opts.Address)
	}
	cfg := config.HTTPClientConfig{TLSConfig: config.TLSConfig{CAFile: opts.CAFile}}
	if opts.BearerTokenFile != "" {
		cfg.Authorization = &config.Authorization{Type: "Bearer", CredentialsFile: opts.BearerTokenFile}
	}
	for what, path := range map[string]string{"CA file": opts.CAFile, "bearer token file": opts.BearerTokenFile} {
		if path == "" {
			continue
		}
		if _, err := os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("Prometheus %s: %w", what, err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("Prometheus client settings: %w", err)
	}
	httpClient, err := config.NewClientFromConfig(cfg, "daemonguard-rollout-analysis", config.WithUserAgent("daemonguard-rollout-controller"))
	if err != nil {
		return nil, fmt.Errorf("Prometheus client: %w", err)
	}
	httpClient.Transport = limitedTransport{next: httpClient.Transport, max: c.maxBytes}
	client, err := api.NewClient(api.Config{Address: opts.Address, Client: httpClient})
	if err != nil {
		return nil, fmt.Errorf("Prometheus client: %w", err)
	}
	c.api, c.address = promv1.NewAPI(client), u.Redacted()
	return c, nil
}

// Address is Prometheus' address without any password in it, for logs; "" when none is
// configured.
func (c *Client) Address() string { return c.address }

// Scope is what a query of a DaemonSet in namespace reads: its own namespace's series, unless an
// administrator marked the namespace for node agents.
func (c *Client) Scope(namespace string, marked bool) rolloutanalysis.Scope {
	if marked {
		return rolloutanalysis.Unscoped
	}
	label := rolloutanalysis.DefaultNamespaceLabel // the zero Client's
	if c != nil && c.label != "" {
		label = c.label
	}
	return rolloutanalysis.Scope{Label: label, Namespace: namespace}
}

// Measure takes every measurement of req, each query rewritten to scope (rolloutanalysis.Scope) first, the
// queries at the same time but no more than the client's bound in flight, each within the
// timeout. It always returns one Measurement per query, in req's order: an answer that cannot be
// used leaves Values empty and says why in Err, which makes the gate's measurement inconclusive.
// Values hold the nodes of req.Wave only, and Baseline those of req.BaselineNodes: nothing else
// Prometheus answered leaves this function.
func (c *Client) Measure(ctx context.Context, req rolloutanalysis.Request, scope rolloutanalysis.Scope) []rolloutanalysis.Measurement {
	out := make([]rolloutanalysis.Measurement, len(req.Queries))
	var wg sync.WaitGroup
	for i, q := range req.Queries {
		out[i].Gate = q.Gate
		if c == nil || c.api == nil {
			out[i].Err = NotConfigured
			continue
		}
		wave, err := scope.Apply(q.Wave)
		baseline := q.Baseline
		if err == nil && baseline != "" {
			baseline, err = scope.Apply(baseline)
		}
		if err != nil {
			out[i].Err = fmt.Sprintf("%s: the query cannot be kept to namespace %s's series: %v", KindBadQuery, scope.Namespace, err)
			continue
		}
		wg.Go(func() {
			var baselineErr error
			var baselineDone sync.WaitGroup
			if baseline != "" {
				baselineDone.Go(func() { out[i].Baseline, baselineErr = c.values(ctx, baseline, q.NodeLabel, req.BaselineNodes) })
			}
			values, err := c.values(ctx, wave, q.NodeLabel, req.Wave)
			baselineDone.Wait()
			switch {
			case err != nil:
				out[i].Err = err.Error()
			case baselineErr != nil:
				out[i].Err = "baseline query: " + baselineErr.Error()
			}
			if out[i].Err != "" {
				out[i].Values, out[i].Baseline = nil, nil
				return
			}
			out[i].Values = values
		})
	}
	wg.Wait()
	return out
}

// values runs query as an instant query, once a slot is free, and reads its vector as node ->
// value for the nodes asked about.
func (c *Client) values(ctx context.Context, query, nodeLabel string, nodes []string) (map[string]float64, error) {
	select {
	case c.slots <- struct{}{}:
		defer func() { <-c.slots }()
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: the measurement was cancelled while it waited for one of the %d queries in flight (--prometheus-max-in-flight)", KindCancelled, cap(c.slots))
	}
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	value, _, err := c.api.Query(qctx, query, time.Time{}, promv1.WithTimeout(c.timeout))
	if err != nil {
		queryDuration.WithLabelValues(resultError).Observe(time.Since(start).Seconds())
		return nil, c.describe(ctx, err)
	}
	values, err := byNode(value, nodeLabel, nodes)
	result := resultOK
	if err != nil {
		result = resultError
	}
	queryDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	return values, err
}

// Kinds of error, the first words of every Err: what went wrong, in words that quote nothing
// Prometheus sent.
const (
	KindNotConfigured   = "not configured"
	KindBadQuery        = "bad query"
	KindQueryFailed     = "query failed"
	KindUnreachable     = "unreachable"
	KindTimeout         = "timeout"
	KindCancelled       = "cancelled"
	KindHTTPError       = "HTTP error"
	KindBadResponse     = "bad response"
	KindAnswerTooLarge  = "answer too large"
	KindTooManySeries   = "too many series"
	KindNotAVector      = "not a vector"
	KindNonNumeric      = "non-numeric"
	KindNoNodeLabel     = "no node label"
	KindTwoSamplesANode = "two samples for a node"
)

// byNode turns an instant vector into node -> value for nodes. A query must return one number
// per node, labelled nodeLabel: anything else is an error that says what kind of answer came
// back, naming a node only when it is one of nodes, never a sample's labels, which could be any
// series' the query reads.
func byNode(value model.Value, nodeLabel string, nodes []string) (map[string]float64, error) {
	vector, ok := value.(model.Vector)
	if !ok {
		kind := "no value"
		if value != nil {
			kind = "a " + value.Type().String()
		}
		return nil, fmt.Errorf("%s: the query returned %s, not an instant vector with one sample per node labelled %s", KindNotAVector, kind, nodeLabel)
	}
	if limit := SeriesLimit(len(nodes)); len(vector) > limit {
		return nil, fmt.Errorf("%s: the answer has %d series, more than the %d allowed for %d nodes: the query must return one sample per node (e.g. sum by (%s) (...))",
			KindTooManySeries, len(vector), limit, len(nodes), nodeLabel)
	}
	asked := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		asked[n] = true
	}
	out := make(map[string]float64, len(nodes))
	seen := make(map[string]bool, len(vector))
	for _, s := range vector {
		node := string(s.Metric[model.LabelName(nodeLabel)])
		switch {
		case node == "":
			return nil, fmt.Errorf("%s: a sample has no %s label: the query must return one sample per node, labelled %s (e.g. sum by (%s) (...))",
				KindNoNodeLabel, nodeLabel, nodeLabel, nodeLabel)
		case seen[node] && asked[node]:
			return nil, fmt.Errorf("%s: two samples for node %s: the query must return one sample per node (e.g. sum by (%s) (...))", KindTwoSamplesANode, node, nodeLabel)
		case seen[node]:
			return nil, fmt.Errorf("%s: two samples with the same %s: the query must return one sample per node (e.g. sum by (%s) (...))", KindTwoSamplesANode, nodeLabel, nodeLabel)
		case s.Histogram != nil:
			return nil, fmt.Errorf("%s: a sample is a native histogram, not a number (e.g. histogram_quantile(0.9, ...))", KindNonNumeric)
		}
		seen[node] = true
		if asked[node] {
			out[node] = float64(s.Value)
		}
	}
	return out, nil
}

// describe turns a query's error into a short sentence for the rollout's status: its kind and
// what the administrator can check, never Prometheus' own text, which can quote series (a
// many-to-many match error names the label sets it matched).
func (c *Client) describe(ctx context.Context, err error) error {
	var apiErr *promv1.Error
	var urlErr *url.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: the measurement was cancelled", KindCancelled)
	case errors.Is(err, errTooLarge):
		return fmt.Errorf("%s: Prometheus' answer is larger than %d bytes: the query must return one sample per node", KindAnswerTooLarge, c.maxBytes)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: Prometheus at %s did not answer within %s (--prometheus-timeout)", KindTimeout, c.address, c.timeout)
	case errors.As(err, &apiErr) && (apiErr.Type == promv1.ErrClient || apiErr.Type == promv1.ErrServer):
		// An HTTP status without Prometheus' own error: a proxy, a wrong path, no permission.
		// Msg is the client's own "server error: 503"; the body is left out.
		return fmt.Errorf("%s: Prometheus at %s answered with %s", KindHTTPError, c.address, apiErr.Msg)
	case errors.As(err, &apiErr) && apiErr.Type == promv1.ErrBadResponse:
		return fmt.Errorf("%s: Prometheus at %s sent an answer that is not its query API's", KindBadResponse, c.address)
	case errors.As(err, &apiErr) && apiErr.Type == promv1.ErrBadData:
		return fmt.Errorf("%s: Prometheus at %s rejected the query (%s): check it with promtool or Prometheus' UI", KindBadQuery, c.address, apiErr.Type)
	case errors.As(err, &apiErr) && apiErr.Type == promv1.ErrTimeout:
		return fmt.Errorf("%s: Prometheus at %s did not finish the query within %s (--prometheus-timeout)", KindTimeout, c.address, c.timeout)
	case errors.As(err, &apiErr):
		typ := apiErr.Type
		if typ != promv1.ErrExec && typ != promv1.ErrCanceled {
			typ = "unknown" // a type Prometheus does not send: say nothing of it
		}
		return fmt.Errorf("%s: Prometheus at %s could not run the query (%s)", KindQueryFailed, c.address, typ)
	case errors.As(err, &urlErr):
		return fmt.Errorf("%s: cannot reach Prometheus at %s (%s)", KindUnreachable, c.address, networkCause(urlErr.Err))
	}
	return fmt.Errorf("%s: cannot reach Prometheus at %s", KindUnreachable, c.address)
}

// networkCause names the kind of a network error, for the administrator to check.
func networkCause(err error) string {
	var dnsErr *net.DNSError
	var unknownCA x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &dnsErr):
		return "its name does not resolve"
	case errors.As(err, &unknownCA), errors.As(err, &hostname), errors.As(err, &invalid):
		return "its certificate is not trusted for this address: check --prometheus-ca-file and --prometheus-address"
	case errors.As(err, &recordErr):
		return "it does not speak TLS: check the scheme of --prometheus-address"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET):
		return "the connection was closed"
	}
	return "network error"
}

// errTooLarge is the error of a body read past the bound.
var errTooLarge = errors.New("answer larger than the bound")

// limitedTransport bounds the bytes read of every answer's body: Prometheus' client reads a body
// whole before it decodes it.
type limitedTransport struct {
	next http.RoundTripper
	max  int64
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: t.max}
	return resp, nil
}

// limitedBody fails a read past left bytes with errTooLarge.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly the bound from a longer one.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		switch {
		case n > 0:
			return 0, errTooLarge
		case err == nil:
			return 0, nil
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// Results of a query, as daemonguard_rollout_analysis_query_duration_seconds labels them.
const (
	resultOK    = "ok"
	resultError = "error"
)

var queryDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "daemonguard_rollout_analysis_query_duration_seconds",
	Help:    "Time Prometheus took to answer an analysis gate's query, by result (ok, error).",
	Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
}, []string{"result"})

func init() {
	metrics.Registry.MustRegister(queryDuration)
}
