package promquery

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
)

// fakePrometheus speaks the part of Prometheus' HTTP API the client uses: /api/v1/query, by POST
// form or GET, answering each query with the JSON body, or the status and body, it is given.
type fakePrometheus struct {
	mu      sync.Mutex
	answers map[string]answer // by query
	tokens  []string          // the Authorization header of every request
	delay   time.Duration
}

type answer struct {
	status int // 200 when 0
	body   string
}

func (f *fakePrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.tokens = append(f.tokens, r.Header.Get("Authorization"))
	f.mu.Unlock()
	if r.URL.Path != "/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-r.Context().Done():
			return
		}
	}
	a, ok := f.answers[r.Form.Get("query")]
	if !ok {
		a = answer{status: http.StatusBadRequest, body: `{"status":"error","errorType":"bad_data","error":"unknown query in the test"}`}
	}
	w.Header().Set("Content-Type", "application/json")
	if a.status != 0 {
		w.WriteHeader(a.status)
	}
	_, _ = w.Write([]byte(a.body))
}

// vector is a successful instant-vector answer of samples given as label sets and values.
func vector(samples ...string) answer {
	return answer{body: `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`}
}

func sample(labels, value string) string {
	return `{"metric":` + labels + `,"value":[1700000000,"` + value + `"]}`
}

// writeFile writes content to a new file of the test's temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// caFileOf is a file holding the certificate of a TLS test server, as its CA.
func caFileOf(t *testing.T, s *httptest.Server) string {
	t.Helper()
	return writeFile(t, "ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})))
}

func TestMeasure(t *testing.T) {
	wave := `up{node=~"w1|w2"}`
	base := `up{node=~"b1"}`
	// Every answer that goes wrong carries another namespace's secret in a label or an error
	// text: no Err may repeat it.
	const secret = `db-password-hunter2`
	answers := map[string]answer{
		wave:              vector(sample(`{"node":"w1"}`, "0.5"), sample(`{"node":"w2"}`, "NaN"), sample(`{"node":"x9","secret":"`+secret+`"}`, "7")),
		base:              vector(sample(`{"node":"b1"}`, "1")),
		"missing_label":   vector(sample(`{"node":"w1"}`, "1"), sample(`{"secret":"`+secret+`"}`, "1")),
		"duplicate_node":  vector(sample(`{"node":"w1","pod":"a"}`, "1"), sample(`{"node":"w1","secret":"`+secret+`"}`, "2")),
		"duplicate_other": vector(sample(`{"node":"`+secret+`"}`, "1"), sample(`{"node":"`+secret+`"}`, "2")),
		"histogram":       vector(`{"metric":{"node":"w1","secret":"` + secret + `"},"histogram":[1700000000,{"count":"1","sum":"1","buckets":[]}]}`),
		"scalar":          {body: `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}`},
		"matrix":          {body: `{"status":"success","data":{"resultType":"matrix","result":[]}}`},
		"bad_query":       {status: http.StatusBadRequest, body: `{"status":"error","errorType":"bad_data","error":"found duplicate series for the match group {node=\"w1\"}: [{secret=\"` + secret + `\"}]"}`},
		"exec_error":      {status: http.StatusUnprocessableEntity, body: `{"status":"error","errorType":"execution","error":"many-to-many matching not allowed: {secret=\"` + secret + `\"}"}`},
		"unavailable":     {status: http.StatusServiceUnavailable, body: "upstream " + secret + "\nmore"},
		"not_json":        {body: "<html>" + secret + "</html>"},
		"by_instance":     vector(sample(`{"instance":"w1"}`, "3")),
	}
	fake := &fakePrometheus{answers: answers}
	server := httptest.NewTLSServer(fake)
	defer server.Close()
	slow := httptest.NewTLSServer(&fakePrometheus{answers: answers, delay: 2 * time.Second})
	defer slow.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	ok := Options{Address: server.URL, CAFile: caFileOf(t, server)}
	tests := map[string]struct {
		opts   Options
		query  rolloutanalysis.GateQuery
		want   map[string]float64 // Values; NaN is compared as NaN
		baseln map[string]float64
		errHas []string // every one is in Err; nil wants no Err
	}{
		"a vector with one sample per node is node -> value of the wave's nodes, NaN kept for the planner to judge": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: wave},
			want: map[string]float64{"w1": 0.5, "w2": nan},
		},
		"a baseline query is measured too": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: wave, Baseline: base},
			want: map[string]float64{"w1": 0.5, "w2": nan}, baseln: map[string]float64{"b1": 1},
		},
		"the node label is the gate's": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "instance", Wave: "by_instance"},
			want: map[string]float64{"w1": 3},
		},
		"a sample without the node label: an error naming the label, not the sample": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "missing_label"},
			errHas: []string{KindNoNodeLabel + ": a sample has no node label", "one sample per node"},
		},
		"two samples for a node of the wave: an error naming the node, not the samples": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "duplicate_node"},
			errHas: []string{KindTwoSamplesANode + ": two samples for node w1", "one sample per node"},
		},
		"two samples for a 'node' outside the wave: an error that does not name it": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "duplicate_other"},
			errHas: []string{"two samples with the same node"},
		},
		"a native histogram: non-numeric": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "histogram"},
			errHas: []string{KindNonNumeric + ": a sample is a native histogram"},
		},
		"a failed baseline query: an error that says it was the baseline's, and no values": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: wave, Baseline: "duplicate_node"},
			errHas: []string{"baseline query: " + KindTwoSamplesANode},
		},
		"a scalar: an error naming the type": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "scalar"},
			errHas: []string{KindNotAVector + ": the query returned a scalar, not an instant vector"},
		},
		"a matrix: an error naming the type": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "matrix"},
			errHas: []string{"returned a matrix, not an instant vector"},
		},
		"a query Prometheus rejects: its error type, never its message, which quotes series": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "bad_query"},
			errHas: []string{KindBadQuery + ": Prometheus at " + server.URL + " rejected the query (bad_data)"},
		},
		"a query Prometheus fails to run: its error type only": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "exec_error"},
			errHas: []string{KindQueryFailed + ": Prometheus at " + server.URL + " could not run the query (execution)"},
		},
		"an HTTP error status: the status, not the body": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "unavailable"},
			errHas: []string{KindHTTPError + ": Prometheus at " + server.URL + " answered with server error: 503"},
		},
		"an answer that is not Prometheus' JSON: a bad response, not its text": {
			opts: ok, query: rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: "not_json"},
			errHas: []string{KindBadResponse + ": "},
		},
		"no answer within the timeout: says so and names the flag": {
			opts:   Options{Address: slow.URL, CAFile: caFileOf(t, slow), Timeout: 100 * time.Millisecond},
			query:  rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: wave},
			errHas: []string{KindTimeout + ": Prometheus at " + slow.URL + " did not answer within 100ms (--prometheus-timeout)"},
		},
		"a server whose certificate the CA did not sign: unreachable, saying why": {
			opts:   Options{Address: server.URL, CAFile: otherCAFile(t)},
			query:  rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: wave},
			errHas: []string{KindUnreachable + ": cannot reach Prometheus at " + server.URL, "certificate is not trusted"},
		},
		"nothing listening: unreachable, connection refused": {
			opts:   Options{Address: closed.URL},
			query:  rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: wave},
			errHas: []string{KindUnreachable + ": cannot reach Prometheus at " + closed.URL, "refused"},
		},
		"no Prometheus configured: every measurement says how to configure one": {
			query:  rolloutanalysis.GateQuery{Gate: "g", NodeLabel: "node", Wave: wave},
			errHas: []string{NotConfigured},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			req := rolloutanalysis.Request{Queries: []rolloutanalysis.GateQuery{tc.query}, Wave: []string{"w1", "w2"}, BaselineNodes: []string{"b1"}}
			got := c.Measure(context.Background(), req, rolloutanalysis.Unscoped)
			if len(got) != 1 || got[0].Gate != tc.query.Gate {
				t.Fatalf("measurements %+v, want one of gate %s", got, tc.query.Gate)
			}
			m := got[0]
			t.Logf("Err: %s", m.Err)
			for _, s := range tc.errHas {
				if !strings.Contains(m.Err, s) {
					t.Errorf("Err %q does not say %q", m.Err, s)
				}
			}
			if strings.Contains(m.Err, secret) || strings.Contains(fmt.Sprint(m.Values, m.Baseline), secret) {
				t.Errorf("the measurement %+v repeats another series' label %q", m, secret)
			}
			if tc.errHas == nil && m.Err != "" {
				t.Errorf("Err %q, want none", m.Err)
			}
			if tc.errHas != nil && (m.Values != nil || m.Baseline != nil) {
				t.Errorf("values %v and baseline %v next to an error", m.Values, m.Baseline)
			}
			if !sameValues(m.Values, tc.want) || !sameValues(m.Baseline, tc.baseln) {
				t.Errorf("values %v, baseline %v; want %v, %v", m.Values, m.Baseline, tc.want, tc.baseln)
			}
		})
	}
}

// otherCAFile is a file holding a CA that signed none of the test servers' certificates (they
// all share one).
func otherCAFile(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "another CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return writeFile(t, "other-ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
}

var nan = func() float64 { var zero float64; return zero / zero }()

func sameValues(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || (v != w && !(v != v && w != w)) {
			return false
		}
	}
	return true
}

func TestMeasureKeepsTheOrderOfTheRequest(t *testing.T) {
	fake := &fakePrometheus{answers: map[string]answer{"a": vector(sample(`{"node":"w1"}`, "1")), "b": vector(sample(`{"node":"w1"}`, "2"))}}
	server := httptest.NewServer(fake)
	defer server.Close()
	c, err := New(Options{Address: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Measure(context.Background(), rolloutanalysis.Request{Queries: []rolloutanalysis.GateQuery{
		{Gate: "first", NodeLabel: "node", Wave: "a"}, {Gate: "second", NodeLabel: "node", Wave: "b"},
	}, Wave: []string{"w1"}}, rolloutanalysis.Unscoped)
	if len(got) != 2 || got[0].Gate != "first" || got[0].Values["w1"] != 1 || got[1].Gate != "second" || got[1].Values["w1"] != 2 {
		t.Errorf("measurements %+v, want first=1 then second=2", got)
	}
}

func TestTheBearerTokenIsReadFromItsFileOnEveryQuery(t *testing.T) {
	fake := &fakePrometheus{answers: map[string]answer{"q": vector(sample(`{"node":"w1"}`, "1"))}}
	server := httptest.NewTLSServer(fake)
	defer server.Close()
	tokenFile := writeFile(t, "token", "first-token\n")
	c, err := New(Options{Address: server.URL, CAFile: caFileOf(t, server), BearerTokenFile: tokenFile})
	if err != nil {
		t.Fatal(err)
	}
	req := rolloutanalysis.Request{Queries: []rolloutanalysis.GateQuery{{Gate: "g", NodeLabel: "node", Wave: "q"}}}
	if m := c.Measure(context.Background(), req, rolloutanalysis.Unscoped); m[0].Err != "" {
		t.Fatal(m[0].Err)
	}
	// The kubelet rotates a projected token by replacing the file.
	if err := os.WriteFile(tokenFile, []byte("rotated-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if m := c.Measure(context.Background(), req, rolloutanalysis.Unscoped); m[0].Err != "" {
		t.Fatal(m[0].Err)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	want := []string{"Bearer first-token", "Bearer rotated-token"}
	if len(fake.tokens) != 2 || fake.tokens[0] != want[0] || fake.tokens[1] != want[1] {
		t.Errorf("Authorization headers %q, want %q", fake.tokens, want)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent")
	tests := map[string]struct {
		opts Options
		want string
	}{
		"an address that is not an http URL":      {Options{Address: "prometheus:9090"}, `Prometheus address "prometheus:9090": want an http or https URL`},
		"a CA file that cannot be read":           {Options{Address: "https://p:9090", CAFile: missing}, "Prometheus CA file: open " + missing},
		"a token file that cannot be read":        {Options{Address: "https://p:9090", BearerTokenFile: missing}, "Prometheus bearer token file: open " + missing},
		"a token file without an address":         {Options{BearerTokenFile: missing}, "without a Prometheus address"},
		"a negative timeout":                      {Options{Address: "https://p:9090", Timeout: -time.Second}, "must not be negative"},
		"a negative bound of queries in flight":   {Options{Address: "https://p:9090", MaxInFlight: -1}, "must not be negative"},
		"a namespace label that is no label name": {Options{Address: "https://p:9090", NamespaceLabel: "kubernetes.io/ns"}, "must be a label name"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}
