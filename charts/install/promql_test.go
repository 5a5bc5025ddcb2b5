package install

import (
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// promql parses PromQL as Prometheus does; the rules and the dashboard use no experimental
// syntax.
var promql = parser.NewParser(parser.Options{})

// withoutThresholds rewrites an alerting rule's expression into the one that returns the data the
// rule judges, whatever its values: every comparison becomes a bool comparison (0 or 1 for every
// series it compares, instead of dropping those that fail); `a unless b` becomes a, since b only
// excludes; absent(x) becomes x, since absent fires on no data and x is what it watches. What
// and, or and vector matching join stays as it is, so the rewritten expression has data only when
// the rule's operands exist with labels that match.
func withoutThresholds(expr string) (string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return "", err
	}
	return dropThresholds(e).String(), nil
}

func dropThresholds(e parser.Expr) parser.Expr {
	switch n := e.(type) {
	case *parser.BinaryExpr:
		if n.Op == parser.LUNLESS {
			return dropThresholds(n.LHS)
		}
		n.LHS, n.RHS = dropThresholds(n.LHS), dropThresholds(n.RHS)
		if n.Op.IsComparisonOperator() {
			n.ReturnBool = true
		}
	case *parser.ParenExpr:
		n.Expr = dropThresholds(n.Expr)
	case *parser.Call:
		if n.Func.Name == "absent" || n.Func.Name == "absent_over_time" {
			return dropThresholds(n.Args[0])
		}
		for i, arg := range n.Args {
			n.Args[i] = dropThresholds(arg)
		}
	case *parser.AggregateExpr:
		n.Expr = dropThresholds(n.Expr)
	case *parser.UnaryExpr:
		n.Expr = dropThresholds(n.Expr)
	case *parser.SubqueryExpr:
		n.Expr = dropThresholds(n.Expr)
	case *parser.StepInvariantExpr:
		n.Expr = dropThresholds(n.Expr)
	}
	return e
}

// selectors returns the series selectors of expr without their offsets and ranges: what each
// selects now.
func selectors(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var out []string
	parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			now := *vs
			now.OriginalOffset, now.Offset, now.OriginalOffsetExpr = 0, 0, nil
			now.Timestamp, now.StartOrEnd = nil, 0
			out = append(out, now.String())
		}
		return nil
	})
	return out, nil
}

// TestWithoutThresholds proves the rewrite on the shapes of the chart's rules: a ratio over a
// threshold, absent of a comparison, and and or with unless, whose excluded operand has no data
// in a Prometheus younger than its offset; and that selectors lose offsets and ranges.
func TestWithoutThresholds(t *testing.T) {
	for expr, want := range map[string]string{
		`absent(up == 1)`: `up == bool 1`,
		`sum by (ns) (rate(a{r="e"}[5m])) / sum by (ns) (rate(a[5m])) > 0.01`:              `sum by (ns) (rate(a{r="e"}[5m])) / sum by (ns) (rate(a[5m])) > bool 0.01`,
		`min(c) - time() < 14 * 86400`:                                                     `min(c) - time() < bool 14 * 86400`,
		`x > 10 and on (ns) (y > 3 * z offset 30m or y unless on (ns) z offset 30m)`:       `x > bool 10 and on (ns) (y > bool 3 * z offset 30m or y)`,
		`p{phase="P"} == 1 and on (ns, name) changes(u[30m]) == 0 and on (ns, name) u < d`: `p{phase="P"} == bool 1 and on (ns, name) changes(u[30m]) == bool 0 and on (ns, name) u < bool d`,
	} {
		got, err := withoutThresholds(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if got != want {
			t.Errorf("withoutThresholds(%s)\n got %s\nwant %s", expr, got, want)
		}
	}
	got, err := selectors(`rate(a{r="d"}[30m]) > 3 * rate(a{r="d"}[1d] offset 30m)`)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`a{r="d"}`, `a{r="d"}`}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("selectors = %q, want %q", got, want)
	}
}
