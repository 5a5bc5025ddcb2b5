package rolloutanalysis

import (
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

func TestApply(t *testing.T) {
	tests := map[string]struct {
		query string
		scope Scope
		want  string // the rewritten query as Prometheus prints it; "" when an error is expected
		err   string // a substring of the error
	}{
		"a bare metric gains the namespace matcher": {
			query: `up`, scope: Scope{Namespace: "team-a"},
			want: `up{namespace="team-a"}`,
		},
		"the gate of the incident: another namespace's secret series is read in the tenant's namespace only": {
			query: `payments_secret_info # {{ nodes }}`, scope: Scope{Namespace: "tenant"},
			want: `payments_secret_info{namespace="tenant"}`,
		},
		"nested functions and an aggregation": {
			query: `max by (node) (rate(container_restarts_total{node=~"a|b"}[5m]))`, scope: Scope{Namespace: "ns"},
			want: `max by (node) (rate(container_restarts_total{namespace="ns",node=~"a|b"}[5m]))`,
		},
		"both sides of a binary operation with on() and ignoring()": {
			query: `sum by (node) (a) / on (node) group_left () sum by (node) (b) > ignoring (x) c`, scope: Scope{Namespace: "ns"},
			want: `sum by (node) (a{namespace="ns"}) / on (node) group_left () sum by (node) (b{namespace="ns"}) > ignoring (x) c{namespace="ns"}`,
		},
		"a subquery with offset and @": {
			query: `max_over_time(rate(x[1m])[10m:1m] offset 5m) + y @ 1700000000`, scope: Scope{Namespace: "ns"},
			want: `max_over_time(rate(x{namespace="ns"}[1m])[10m:1m] offset 5m) + y{namespace="ns"} @ 1700000000.000`,
		},
		"an existing matcher on the namespace label is replaced, whatever its operator": {
			query: `a{namespace="other"} + b{namespace=~".+"} + c{namespace!="ns"}`, scope: Scope{Namespace: "ns"},
			want: `a{namespace="ns"} + b{namespace="ns"} + c{namespace="ns"}`,
		},
		"a selector by name matcher alone": {
			query: `{__name__=~".+"}`, scope: Scope{Namespace: "ns"},
			want: `{__name__=~".+",namespace="ns"}`,
		},
		"a number literal has no selector to scope": {
			query: `1`, scope: Scope{Namespace: "ns"},
			want: `1`,
		},
		"the configured label is the one added and replaced": {
			query: `a{kubernetes_namespace="x",namespace="y"}`, scope: Scope{Label: "kubernetes_namespace", Namespace: "ns"},
			want: `a{kubernetes_namespace="ns",namespace="y"}`,
		},
		"label_replace cannot rename its way out: the selector inside is scoped": {
			query: `label_replace(secret_info, "node", "$1", "secret", "(.*)")`, scope: Scope{Namespace: "ns"},
			want: `label_replace(secret_info{namespace="ns"}, "node", "$1", "secret", "(.*)")`,
		},
		"a marked namespace keeps its query as written, unparsed": {
			query: `whatever ( is written`, scope: Unscoped,
			want: `whatever ( is written`,
		},
		"a query that does not parse is refused": {
			query: `sum(`, scope: Scope{Namespace: "ns"},
			err: "PromQL does not parse",
		},
		"a namespace label that is not a label name is refused": {
			query: `up`, scope: Scope{Label: "a-b", Namespace: "ns"},
			err: "not a Prometheus label name",
		},
		"a query past the size bound is refused before parsing": {
			query: strings.Repeat("a+", MaxQueryBytes) + "a", scope: Scope{Namespace: "ns"},
			err: "more than the",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := tc.scope.Apply(tc.query)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Apply(%q) = %q, %v; want an error containing %q", tc.query, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Apply(%q) = %q, %v; want %q", tc.query, got, err, tc.want)
			}
			assertScoped(t, got, tc.scope)
		})
	}
}

// assertScoped fails unless query parses and, when s names a namespace, every selector in it
// carries exactly one matcher on the namespace label, label="namespace".
func assertScoped(t *testing.T, query string, s Scope) {
	t.Helper()
	if s.Namespace == "" {
		return
	}
	expr, err := ParseQuery(query)
	if err != nil {
		t.Fatalf("the rewritten query %q does not parse: %v", query, err)
	}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		n := 0
		for _, m := range vs.LabelMatchers {
			if m.Name == s.label() {
				n++
				if m.Type.String() != "=" || m.Value != s.Namespace {
					t.Errorf("selector %s of %q: matcher %s, want %s=%q", vs, query, m, s.label(), s.Namespace)
				}
			}
		}
		if n != 1 {
			t.Errorf("selector %s of %q: %d matchers on %s, want 1", vs, query, n, s.label())
		}
		return nil
	})
}

// FuzzApply: whatever the query, Apply either refuses it or returns a query that parses and whose
// every selector reads the scope's namespace alone.
func FuzzApply(f *testing.F) {
	for _, seed := range []string{
		`up`, `1`, `{__name__=~".+"}`, `sum by (node) (rate(x{namespace="other"}[5m]))`,
		`a / on (node) group_left () b`, `max_over_time(x[10m:1m] offset 5m)`, `y @ start()`,
		`label_replace(a, "node", "$1", "secret", "(.*)")`, `a or vector(1)`, `-a{b!~"c"} unless b`,
		`histogram_quantile(0.9, sum by (le, node) (rate(h_bucket[5m])))`, `count_values("v", a)`,
	} {
		f.Add(seed, "ns")
	}
	f.Fuzz(func(t *testing.T, query, namespace string) {
		if namespace == "" {
			return
		}
		s := Scope{Namespace: namespace}
		got, err := s.Apply(query)
		if err != nil {
			return
		}
		assertScoped(t, got, s)
		// A second rewrite changes nothing: the printed form is stable.
		again, err := s.Apply(got)
		if err != nil || again != got {
			t.Fatalf("Apply(Apply(%q)) = %q, %v; want %q", query, again, err, got)
		}
	})
}
