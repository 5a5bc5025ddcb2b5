// Package promscope keeps an analysis gate to its own tenant's series: it rewrites a PromQL query,
// with Prometheus' own parser, so that every selector in it matches only one namespace's series.
// The rollout controller, `daemonguard rollout plan` and admission (which refuses a query that
// cannot be rewritten) share this one definition; it imports nothing of daemonguard's, so that
// each of them can import it.
package promscope

import (
	"errors"
	"fmt"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// DefaultLabel is the label that names a series' namespace when none is configured: the label
// kube-state-metrics, the kubelet's cAdvisor metrics and the Prometheus Operator's scrape
// configurations give a series scraped from a namespace's pods.
const DefaultLabel = "namespace"

// MaxQueryBytes bounds a query handed to the parser: the annotation that holds it is bounded at
// admission, and the controller, which may see an object admitted while the webhook was bypassed,
// checks again before the work.
const MaxQueryBytes = 64 << 10

// Scope says whose series a gate's query may read.
type Scope struct {
	// Label is the series label that names the namespace; "" means DefaultLabel.
	Label string
	// Namespace is the only namespace whose series the query may read; "" leaves the query as
	// written (the DaemonSet is in a namespace an administrator marked for node agents, which may
	// read cluster-wide node metrics).
	Namespace string
}

// Unscoped is the Scope of a gate that reads what it names.
var Unscoped = Scope{}

// parserOptions accept the PromQL a Prometheus with experimental functions and duration
// expressions serves, so that a query such a Prometheus runs is not refused here; whatever the
// syntax, every series a query reads comes through a vector selector, which Apply scopes.
var parserOptions = parser.Options{EnableExperimentalFunctions: true, ExperimentalDurationExpr: true}

// Apply returns query with the matcher label="namespace" on every vector selector, those in
// range selectors and subqueries included, in place of any matcher it had on label; unchanged
// when s names no namespace. A query that does not parse is an error that quotes the parser, and
// so only the query's own text.
func (s Scope) Apply(query string) (string, error) {
	if s.Namespace == "" {
		return query, nil
	}
	expr, err := Parse(query)
	if err != nil {
		return "", err
	}
	label := s.label()
	if !ValidLabel(label) {
		return "", fmt.Errorf("namespace label %q is not a Prometheus label name", label)
	}
	matcher, err := labels.NewMatcher(labels.MatchEqual, label, s.Namespace)
	if err != nil {
		return "", fmt.Errorf("namespace matcher: %w", err)
	}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			kept := vs.LabelMatchers[:0]
			for _, m := range vs.LabelMatchers {
				if m.Name != label {
					kept = append(kept, m)
				}
			}
			vs.LabelMatchers = append(kept, matcher)
		}
		return nil
	})
	return expr.String(), nil
}

func (s Scope) label() string {
	if s.Label == "" {
		return DefaultLabel
	}
	return s.Label
}

// Parse parses query as Apply does, within MaxQueryBytes.
func Parse(query string) (parser.Expr, error) {
	if len(query) > MaxQueryBytes {
		return nil, fmt.Errorf("the query is %d bytes, more than the %d a gate may have", len(query), MaxQueryBytes)
	}
	expr, err := parser.NewParser(parserOptions).ParseExpr(query)
	if err != nil {
		var perrs parser.ParseErrors
		if errors.As(err, &perrs) && len(perrs) > 0 {
			// The first error is the one to fix; the rest often follow from it.
			return nil, fmt.Errorf("PromQL does not parse: %s", perrs[0].Error())
		}
		return nil, fmt.Errorf("PromQL does not parse: %w", err)
	}
	return expr, nil
}

// ValidLabel tells a Prometheus label name (the namespace label setting): the legacy rule,
// [a-zA-Z_][a-zA-Z0-9_]*, a name every Prometheus accepts in a selector without quoting.
func ValidLabel(name string) bool { return model.LegacyValidation.IsValidLabelName(name) }
