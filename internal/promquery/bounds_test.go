package promquery

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
)

// manySeries is an answer of n series, each for another node, the first n-1 outside the wave.
func manySeries(n int) answer {
	samples := make([]string, n)
	for i := range samples {
		samples[i] = sample(fmt.Sprintf(`{"node":"n%d","secret":"db-password-%d"}`, i, i), "1")
	}
	return vector(samples...)
}

func TestMeasureBoundsEveryAnswer(t *testing.T) {
	fake := &fakePrometheus{answers: map[string]answer{
		"worst":     manySeries(100_000),
		"thousands": manySeries(5_000),
		"at_limit":  manySeries(SeriesLimit(2)),
		"long":      vector(sample(`{"node":"w1","pad":"`+strings.Repeat("x", 2<<20)+`"}`, "1")),
	}}
	server := httptest.NewServer(fake)
	defer server.Close()
	tests := map[string]struct {
		opts  Options
		query string
		want  string // a substring of Err; "" wants none
	}{
		"100,000 series: more than the bound on the bytes of an answer": {
			opts: Options{Address: server.URL}, query: "worst",
			want: KindAnswerTooLarge + ": Prometheus' answer is larger than 4194304 bytes",
		},
		"5,000 series for 2 nodes, within the byte bound: too many series": {
			opts: Options{Address: server.URL}, query: "thousands",
			want: KindTooManySeries + ": the answer has 5000 series, more than the 100 allowed for 2 nodes",
		},
		"as many series as allowed: measured": {
			opts: Options{Address: server.URL}, query: "at_limit",
		},
		"one series with a 2 MiB label under a 1 MiB bound: too large": {
			opts: Options{Address: server.URL, MaxResponseBytes: 1 << 20}, query: "long",
			want: KindAnswerTooLarge,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			req := rolloutanalysis.Request{Queries: []rolloutanalysis.GateQuery{{Gate: "g", NodeLabel: "node", Wave: tc.query}}, Wave: []string{"w1", "w2"}}
			m := c.Measure(context.Background(), req, rolloutanalysis.Unscoped)[0]
			switch {
			case tc.want == "" && m.Err != "":
				t.Fatalf("Err %q, want none", m.Err)
			case !strings.Contains(m.Err, tc.want):
				t.Fatalf("Err %q, want one that says %q", m.Err, tc.want)
			case strings.Contains(m.Err, "db-password"):
				t.Fatalf("Err %q repeats a series' label", m.Err)
			}
		})
	}
}

func TestSeriesLimit(t *testing.T) {
	for nodes, want := range map[int]int{0: MinSeriesLimit, 1: MinSeriesLimit, 50: 100, 51: 102, 5000: 10_000} {
		if got := SeriesLimit(nodes); got != want {
			t.Errorf("SeriesLimit(%d) = %d, want %d", nodes, got, want)
		}
	}
}

// countingPrometheus answers every query after a pause, and records the most queries it had at
// once.
type countingPrometheus struct {
	now, most atomic.Int32
}

func (p *countingPrometheus) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.now.Add(1)
	defer p.now.Add(-1)
	for {
		most := p.most.Load()
		if n <= most || p.most.CompareAndSwap(most, n) {
			break
		}
	}
	time.Sleep(20 * time.Millisecond)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(vector(sample(`{"node":"w1"}`, "1")).body))
}

// Twenty DaemonSets' reconciles measure ten gates each with a baseline at once: Prometheus never
// has more than the bound of queries at a time, and every measurement is taken.
func TestMeasureBoundsTheQueriesInFlight(t *testing.T) {
	prom := &countingPrometheus{}
	server := httptest.NewServer(prom)
	defer server.Close()
	c, err := New(Options{Address: server.URL, MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	var queries []rolloutanalysis.GateQuery
	for i := range 10 {
		queries = append(queries, rolloutanalysis.GateQuery{Gate: fmt.Sprint("g", i), NodeLabel: "node", Wave: "up", Baseline: "up"})
	}
	req := rolloutanalysis.Request{Queries: queries, Wave: []string{"w1"}, BaselineNodes: []string{"w1"}}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for _, m := range c.Measure(context.Background(), req, rolloutanalysis.Scope{Namespace: "ns"}) {
				if m.Err != "" || m.Values["w1"] != 1 {
					t.Errorf("measurement %+v, want w1=1", m)
				}
			}
		})
	}
	wg.Wait()
	if most := prom.most.Load(); most > 3 || most < 1 {
		t.Errorf("%d queries at Prometheus at once, want at most 3", most)
	}
}

// A reconcile that ends while its queries wait for a slot gets a cancelled measurement, at once.
func TestAQueryWaitingForASlotEndsWithItsContext(t *testing.T) {
	c, err := New(Options{Address: "http://127.0.0.1:1", MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.slots <- struct{}{} // every slot taken
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := rolloutanalysis.Request{Queries: []rolloutanalysis.GateQuery{{Gate: "g", NodeLabel: "node", Wave: "up"}}, Wave: []string{"w1"}}
	if m := c.Measure(ctx, req, rolloutanalysis.Unscoped)[0]; !strings.HasPrefix(m.Err, KindCancelled+": ") {
		t.Errorf("Err %q, want a cancelled measurement", m.Err)
	}
}

// A DaemonSet outside the marked namespaces: Prometheus is asked the query kept to its
// namespace, and a query that cannot be kept there is not sent at all.
func TestMeasureScopesTheQueries(t *testing.T) {
	scoped := `payments_secret_info{namespace="tenant",node=~"w1"}`
	fake := &fakePrometheus{answers: map[string]answer{scoped: vector(sample(`{"node":"w1","namespace":"tenant"}`, "1"))}}
	server := httptest.NewServer(fake)
	defer server.Close()
	c, err := New(Options{Address: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	scope := c.Scope("tenant", false)
	req := rolloutanalysis.Request{Wave: []string{"w1"}, Queries: []rolloutanalysis.GateQuery{
		{Gate: "reads-another-namespace", NodeLabel: "node", Wave: `payments_secret_info{namespace="payments",node=~"w1"}`},
		{Gate: "does-not-parse", NodeLabel: "node", Wave: `sum(up{node=~"w1"}`},
	}}
	got := c.Measure(context.Background(), req, scope)
	if got[0].Err != "" || got[0].Values["w1"] != 1 {
		t.Errorf("the scoped gate measured %+v, want w1=1 from the query %s", got[0], scoped)
	}
	if want := KindBadQuery + ": the query cannot be kept to namespace tenant's series: PromQL does not parse"; !strings.HasPrefix(got[1].Err, want) {
		t.Errorf("the gate that does not parse: Err %q, want %q", got[1].Err, want)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.tokens) != 1 {
		t.Errorf("%d queries sent, want only the scoped one", len(fake.tokens))
	}
	if s := c.Scope("infra", true); s != rolloutanalysis.Unscoped {
		t.Errorf("a marked namespace's scope %+v, want the query as written", s)
	}
}
