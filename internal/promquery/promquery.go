// Package promquery measures the rollout controller's analysis gates: it runs each gate's PromQL
// queries as instant queries against Prometheus' HTTP API, with Prometheus' own Go client, and
// turns every answer into one value per node, or into a sentence that says why there is none.
package promquery

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
)

// DefaultTimeout bounds one query when Options.Timeout is not set.
const DefaultTimeout = 10 * time.Second

// NotConfigured is every measurement's Err when no Prometheus address is set: the gate's
// measurement is then inconclusive, and the rollout waits rather than going on unmeasured.
const NotConfigured = "no Prometheus is configured: set --prometheus-address (chart value controller.prometheus.address)"

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
}

// Client measures analysis gates against one Prometheus. Its zero value and a Client made
// without an address answer every measurement with NotConfigured.
type Client struct {
	api     promv1.API // nil without an address
	address string
	timeout time.Duration
}

// New checks opts and makes the client. The files must be readable now: a mount that is missing
// is a setup mistake to report at start, not a rollout that waits for an hour to say so.
func New(opts Options) (*Client, error) {
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("Prometheus timeout %s: must not be negative", opts.Timeout)
	}
	c := &Client{timeout: opts.Timeout}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
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

// Measure takes every measurement of req, the queries at the same time, each within the
// timeout. It always returns one Measurement per query, in req's order: an answer that cannot be
// used leaves Values empty and says why in Err, which makes the gate's measurement inconclusive.
func (c *Client) Measure(ctx context.Context, req rolloutplan.AnalysisRequest) []rolloutplan.Measurement {
	out := make([]rolloutplan.Measurement, len(req.Queries))
	var wg sync.WaitGroup
	for i, q := range req.Queries {
		out[i].Gate = q.Gate
		if c == nil || c.api == nil {
			out[i].Err = NotConfigured
			continue
		}
		wg.Go(func() {
			var baselineErr error
			var baselineDone sync.WaitGroup
			if q.Baseline != "" {
				baselineDone.Go(func() { out[i].Baseline, baselineErr = c.values(ctx, q.Baseline, q.NodeLabel) })
			}
			values, err := c.values(ctx, q.Wave, q.NodeLabel)
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

// values runs query as an instant query and reads its vector as node -> value.
func (c *Client) values(ctx context.Context, query, nodeLabel string) (map[string]float64, error) {
	qctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	value, _, err := c.api.Query(qctx, query, time.Time{}, promv1.WithTimeout(c.timeout))
	if err != nil {
		queryDuration.WithLabelValues(resultError).Observe(time.Since(start).Seconds())
		return nil, c.describe(ctx, err)
	}
	values, err := byNode(value, nodeLabel)
	result := resultOK
	if err != nil {
		result = resultError
	}
	queryDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	return values, err
}

// byNode turns an instant vector into node -> value. A query must return one sample per node,
// labelled nodeLabel: anything else is an error that names what came back, so that the gate's
// author can fix the query.
func byNode(value model.Value, nodeLabel string) (map[string]float64, error) {
	vector, ok := value.(model.Vector)
	if !ok {
		kind := "no value"
		if value != nil {
			kind = "a " + value.Type().String()
		}
		return nil, fmt.Errorf("the query returned %s, not an instant vector with one sample per node labelled %s", kind, nodeLabel)
	}
	out := make(map[string]float64, len(vector))
	seen := make(map[string]model.Metric, len(vector))
	for _, s := range vector {
		node := string(s.Metric[model.LabelName(nodeLabel)])
		if node == "" {
			return nil, fmt.Errorf("the sample %s has no %s label: the query must return one sample per node, labelled %s (e.g. sum by (%s) (...))",
				s.Metric, nodeLabel, nodeLabel, nodeLabel)
		}
		if first, dup := seen[node]; dup {
			return nil, fmt.Errorf("two samples for node %s, %s and %s: the query must return one sample per node (e.g. sum by (%s) (...))",
				node, first, s.Metric, nodeLabel)
		}
		seen[node] = s.Metric
		out[node] = float64(s.Value)
	}
	return out, nil
}

// describe turns a query's error into a short sentence for the rollout's status.
func (c *Client) describe(ctx context.Context, err error) error {
	var apiErr *promv1.Error
	var urlErr *url.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("the measurement was cancelled: %w", context.Cause(ctx))
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("Prometheus at %s did not answer within %s (--prometheus-timeout)", c.address, c.timeout)
	case errors.As(err, &apiErr) && (apiErr.Type == promv1.ErrClient || apiErr.Type == promv1.ErrServer || apiErr.Type == promv1.ErrBadResponse):
		// An HTTP status without Prometheus' own error: a proxy, a wrong path, no permission.
		return fmt.Errorf("Prometheus at %s answered with %s%s", c.address, apiErr.Msg, detail(apiErr.Detail))
	case errors.As(err, &apiErr):
		return fmt.Errorf("Prometheus at %s rejected the query (%s): %s", c.address, apiErr.Type, apiErr.Msg)
	case errors.As(err, &urlErr):
		return fmt.Errorf("cannot reach Prometheus at %s: %w", c.address, urlErr.Err)
	}
	return fmt.Errorf("Prometheus at %s: %w", c.address, err)
}

// maxDetail bounds the body of an HTTP error quoted in a status: a proxy's error page can be
// long, and the status annotation is read in a terminal.
const maxDetail = 200

// detail is the first line of an HTTP error's body, shortened; "" for none.
func detail(body string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(body), "\n")
	if line == "" {
		return ""
	}
	if len(line) > maxDetail {
		line = line[:maxDetail] + "…"
	}
	return " (" + line + ")"
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
