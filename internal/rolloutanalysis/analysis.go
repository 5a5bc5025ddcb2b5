// Package rolloutanalysis is the vocabulary of the rollout's analysis gates, shared by the
// planner that decides what to measure and judges it (controller/rolloutplan), the Prometheus
// client that measures (internal/promquery), which depends on nothing of the planner, and
// admission, which refuses a gate whose query cannot be kept to its tenant: what a reconcile must
// measure (Request, one GateQuery per due gate), the one scope that keeps a gate's PromQL to its
// own namespace's series (Scope, rewriting the query with Prometheus' own parser), what
// Prometheus answered (Measurement), and the node-by-node judgement of a measurement against a
// gate's bounds (Judge), which the rollout and `rollout plan` both apply. It takes plain data:
// no client, no clock.
package rolloutanalysis

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Request is what a reconcile must measure before it plans: the queries of every gate whose
// measurement is due, rendered for the wave and, for a baseline gate, for its baseline. The
// planner makes it (rolloutplan.DueAnalysis); the controller runs the queries (promquery) and
// hands the answers to the planner as rolloutplan.RolloutState.Measurements.
type Request struct {
	Queries []GateQuery
	// Wave and BaselineNodes are the nodes the queries select, in rollout order.
	Wave, BaselineNodes []string
}

// GateQuery is one gate's measurement to take.
type GateQuery struct {
	Gate      string
	NodeLabel string // the result label that names the node
	// Wave is the query over the wave's nodes; Baseline over the baseline nodes, "" without one.
	Wave, Baseline string
}

// Measurement is what Prometheus answered to a GateQuery: one value per node that has a sample.
type Measurement struct {
	Gate     string
	Values   map[string]float64 // node -> value of the wave query
	Baseline map[string]float64 // node -> value of the baseline query
	// Err says why there is no answer (Prometheus unreachable or not configured, a query it
	// rejects); the measurement is then inconclusive.
	Err string
}

// NodeValue is one node's value in a measurement.
type NodeValue struct {
	Node  string
	Value float64
}

// Judgement is one gate's measurement judged node by node, before anything is worded or
// decided: the rollout judges each wave with it (rolloutplan's judge), and `rollout plan` the
// nodes it measures today, so that both apply the bounds the same way.
type Judgement struct {
	// Measured counts the nodes with a value; Missing are the nodes without a sample, or with
	// NaN, in the order given.
	Measured int
	Missing  []string
	// Baseline is the median of the baseline nodes' values and BaselineNodes how many have one
	// (baseline gates only). Without any, nothing is judged out of bounds: there is nothing to
	// compare with.
	Baseline      float64
	BaselineNodes int
	// OutOfBounds are the nodes whose value breaks the gate's bounds (for a baseline gate, its
	// difference from Baseline), in the order given.
	OutOfBounds []NodeValue
	// Bound says the bounds as messages show them: "max 0.05", with a baseline "max 0.5 of the
	// baseline median 0.1 (3 nodes)".
	Bound string
}

// Judge judges m's values for nodes against g's bounds, which are inclusive; for a baseline
// gate, each value minus the median of m's Baseline values of the baseline nodes. A node
// without a value is Missing, never in bounds nor out of them.
func Judge(g rolloutapi.Gate, m Measurement, nodes, baseline []string) Judgement {
	j := Judgement{Bound: boundText(g)}
	for _, n := range nodes {
		if v, ok := m.Values[n]; !ok || math.IsNaN(v) {
			j.Missing = append(j.Missing, n)
		} else {
			j.Measured++
		}
	}
	if g.Baseline {
		var values []float64
		for _, n := range baseline {
			if v, ok := m.Baseline[n]; ok && !math.IsNaN(v) {
				values = append(values, v)
			}
		}
		if len(values) == 0 {
			return j
		}
		j.Baseline, j.BaselineNodes = median(values), len(values)
		j.Bound = fmt.Sprintf("%s of the baseline median %s (%d nodes)", j.Bound, FormatValue(j.Baseline), len(values))
	}
	for _, n := range nodes {
		v, ok := m.Values[n]
		if !ok || math.IsNaN(v) {
			continue
		}
		if d := v - j.Baseline; (g.Max != nil && d > *g.Max) || (g.Min != nil && d < *g.Min) {
			j.OutOfBounds = append(j.OutOfBounds, NodeValue{Node: n, Value: v})
		}
	}
	return j
}

// boundText says a gate's bounds: "max 0.05", "min 1", "min 1, max 5".
func boundText(g rolloutapi.Gate) string {
	var parts []string
	if g.Min != nil {
		parts = append(parts, "min "+FormatValue(*g.Min))
	}
	if g.Max != nil {
		parts = append(parts, "max "+FormatValue(*g.Max))
	}
	return strings.Join(parts, ", ")
}

// FormatValue is a measured value as the rollout's messages show it: four significant digits.
func FormatValue(v float64) string { return strconv.FormatFloat(v, 'g', 4, 64) }

func median(values []float64) float64 {
	s := slices.Clone(values)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// DefaultNamespaceLabel is the label that names a series' namespace when none is configured: the label
// kube-state-metrics, the kubelet's cAdvisor metrics and the Prometheus Operator's scrape
// configurations give a series scraped from a namespace's pods.
const DefaultNamespaceLabel = "namespace"

// MaxQueryBytes bounds a query handed to the parser: the annotation that holds it is bounded at
// admission, and the controller, which may see an object admitted while the webhook was bypassed,
// checks again before the work.
const MaxQueryBytes = 64 << 10

// Scope says whose series a gate's query may read.
type Scope struct {
	// Label is the series label that names the namespace; "" means DefaultNamespaceLabel.
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
	expr, err := ParseQuery(query)
	if err != nil {
		return "", err
	}
	label := s.label()
	if !ValidLabelName(label) {
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
		return DefaultNamespaceLabel
	}
	return s.Label
}

// ParseQuery parses query as Apply does, within MaxQueryBytes.
func ParseQuery(query string) (parser.Expr, error) {
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

// ValidLabelName tells a Prometheus label name (the namespace label setting): the legacy rule,
// [a-zA-Z_][a-zA-Z0-9_]*, a name every Prometheus accepts in a selector without quoting.
func ValidLabelName(name string) bool { return model.LegacyValidation.IsValidLabelName(name) }
