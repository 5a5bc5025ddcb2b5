package rolloutapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	opautil "github.com/open-policy-agent/opa/v1/util"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Analysis settings: annotations a user writes on the DaemonSet, next to the other settings.
const (
	// AnnotationAnalysis lists the rollout's analysis gates as YAML (a list of Gate). After each
	// wave of replaced nodes, and before the next pods are deleted, every gate's PromQL query is
	// measured Count times, Interval apart, and must hold for every node of the wave.
	AnnotationAnalysis = "daemonguard.io/analysis"
	// AnnotationOnAnalysisFailure says what a failed gate does: "halt" (the default) stops the
	// rollout where it is; "rollback" also puts the template of the previous revision back.
	AnnotationOnAnalysisFailure = "daemonguard.io/on-analysis-failure"
)

// Values of AnnotationOnAnalysisFailure.
const (
	OnAnalysisFailureHalt     = "halt"
	OnAnalysisFailureRollback = "rollback"
)

// StatusAnalysis is the analysis of the wave under way and the last measurement of each gate, as
// JSON (AnalysisStatus).
const StatusAnalysis = StatusPrefix + "analysis"

// ReasonAnalysisFailed is the Failed reason when a gate's measurement of a wave fails.
const ReasonAnalysisFailed = "AnalysisFailed"

// Reasons of the analysis under way.
const (
	// ReasonAnalysisRunning (Progressing): the wave is being measured; nothing is deleted.
	ReasonAnalysisRunning = "AnalysisRunning"
	// ReasonAnalysisInconclusive (Paused): a measurement had no data for some node of the wave,
	// or Prometheus did not answer; it is taken again after the gate's interval.
	ReasonAnalysisInconclusive = "AnalysisInconclusive"
)

// Gate defaults and bounds; the rollout_annotations policy checks the same at admission.
const (
	DefaultGateInterval  = 30 * time.Second
	DefaultGateCount     = 3
	DefaultGateNodeLabel = "node"
	MinGateInterval      = time.Second
	MaxGateInterval      = time.Hour
	MaxGateCount         = 100
)

// Gate is one analysis gate of AnnotationAnalysis.
type Gate struct {
	// Name names the gate in messages and the status (a DNS label).
	Name string
	// Query is PromQL with placeholders (QueryPlaceholders) that returns one sample per node of
	// the wave, labelled with NodeLabel.
	Query string
	// Max and Min bound every node's value; at least one is set. With Baseline they bound the
	// difference between a node's value and the median of the baseline nodes' values.
	Max, Min *float64
	// Interval is the time between measurements, and before the first one.
	Interval time.Duration
	// Count is how many measurements in a row must pass.
	Count int
	// NodeLabel is the label of the query's result that names the node.
	NodeLabel string
	// Baseline compares each node of the wave with nodes outside it (old revision first, the
	// same topology domain first), so that noise every node shares does not halt the rollout.
	Baseline bool
}

// gateYAML is a Gate as written. A field set to null is as if left out; an empty interval or
// nodeLabel is not.
type gateYAML struct {
	Name      string   `json:"name"`
	Query     string   `json:"query"`
	Max       *float64 `json:"max"`
	Min       *float64 `json:"min"`
	Interval  *string  `json:"interval"`
	Count     *int     `json:"count"`
	NodeLabel *string  `json:"nodeLabel"`
	Baseline  bool     `json:"baseline"`
}

// gateFields are the fields of a gate as written, in gateYAML's order and spelling.
var gateFields = []string{"name", "query", "max", "min", "interval", "count", "nodeLabel", "baseline"}

// Query placeholders, written {{ name }}, and what each expands to.
const (
	// PlaceholderNodes is the nodes measured, as a regular expression for a double-quoted PromQL
	// string: node=~"{{ nodes }}".
	PlaceholderNodes = "nodes"
	// PlaceholderRevision is the revision the rollout heads to (controller-revision-hash).
	PlaceholderRevision = "revision"
	// PlaceholderOldRevision is the revision most old pods run; empty when none is left.
	PlaceholderOldRevision = "old_revision"
	// PlaceholderName and PlaceholderNamespace are the DaemonSet's.
	PlaceholderName      = "name"
	PlaceholderNamespace = "namespace"
)

// QueryPlaceholders are every placeholder a query may use.
var QueryPlaceholders = []string{PlaceholderNodes, PlaceholderRevision, PlaceholderOldRevision, PlaceholderName, PlaceholderNamespace}

// placeholder matches a {{ name }} placeholder; the rollout_annotations policy uses the same
// expression.
var placeholder = regexp.MustCompile(`\{\{\s*([A-Za-z_]*)\s*\}\}`)

// QueryVars are what a query's placeholders expand to.
type QueryVars struct {
	Nodes                 []string
	Revision, OldRevision string
	Name, Namespace       string
}

// RenderQuery expands the placeholders of query. Node names are DNS subdomains: only their dots
// need escaping, twice, once for the regular expression and once for the PromQL string.
func RenderQuery(query string, v QueryVars) string {
	nodes := make([]string, len(v.Nodes))
	for i, n := range v.Nodes {
		nodes[i] = strings.ReplaceAll(n, ".", `\\.`)
	}
	values := map[string]string{
		PlaceholderNodes: strings.Join(nodes, "|"), PlaceholderRevision: v.Revision, PlaceholderOldRevision: v.OldRevision,
		PlaceholderName: v.Name, PlaceholderNamespace: v.Namespace,
	}
	return placeholder.ReplaceAllStringFunc(query, func(m string) string {
		return values[placeholder.FindStringSubmatch(m)[1]]
	})
}

// ParseGates reads AnnotationAnalysis; empty means no gates. The rollout_annotations admission
// policy checks the same rules and names the offending field, so that a user meets the error at
// admission; this parser is the controller's guard for DaemonSets admitted while the webhook was
// bypassed. It reads the YAML with OPA's reader, the one behind the policy's yaml.unmarshal
// (YAML 1.2: yes is a string; a repeated key keeps its last value), field names are
// case-sensitive, and a value's type is as written (name: 123 is a number, not the name "123").
//
// A value past its size limit (CheckAnnotationSize) is refused before it is read, and a list of
// more than MaxGates gates before any gate is.
func ParseGates(v string) ([]Gate, error) {
	if err := CheckAnnotationSize(AnnotationAnalysis, v); err != nil {
		return nil, err
	}
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var items []json.RawMessage
	if err := opautil.Unmarshal([]byte(v), &items); err != nil {
		return nil, fmt.Errorf("want a YAML list of gates: %w", err)
	}
	if len(items) == 0 {
		return nil, errors.New("want a YAML list of at least one gate")
	}
	if len(items) > MaxGates {
		return nil, fmt.Errorf("%d gates: at most %d gates are allowed per DaemonSet (each is a Prometheus query at every interval)", len(items), MaxGates)
	}
	gates := make([]Gate, 0, len(items))
	seen := map[string]bool{}
	for i, item := range items {
		g, err := decodeGate(item)
		if err != nil {
			return nil, fmt.Errorf("gate %d: %w", i+1, err)
		}
		if seen[g.Name] {
			return nil, fmt.Errorf("gate %d: name %q is used twice", i+1, g.Name)
		}
		seen[g.Name] = true
		gates = append(gates, g)
	}
	return gates, nil
}

// decodeGate reads one gate, as JSON, with only the fields of gateFields spelt exactly so
// (encoding/json alone would take Name or NAME for name).
func decodeGate(item json.RawMessage) (Gate, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(item, &fields); err != nil || fields == nil {
		return Gate{}, fmt.Errorf("want an object with the fields %s, not %s", strings.Join(gateFields, ", "), item)
	}
	for f := range fields {
		if !slices.Contains(gateFields, f) {
			return Gate{}, fmt.Errorf("unknown field %q; known: %s", f, strings.Join(gateFields, ", "))
		}
	}
	var r gateYAML
	if err := json.Unmarshal(item, &r); err != nil {
		return Gate{}, err
	}
	return r.gate()
}

func (r gateYAML) gate() (Gate, error) {
	g := Gate{Name: r.Name, Query: r.Query, Max: r.Max, Min: r.Min, Interval: DefaultGateInterval, Count: DefaultGateCount,
		NodeLabel: DefaultGateNodeLabel, Baseline: r.Baseline}
	if errs := validation.IsDNS1123Label(r.Name); len(errs) > 0 {
		return g, fmt.Errorf("name %q: %s", r.Name, strings.Join(errs, "; "))
	}
	if strings.TrimSpace(r.Query) == "" {
		return g, errors.New("query: must not be empty")
	}
	for _, m := range placeholder.FindAllStringSubmatch(r.Query, -1) {
		if !slices.Contains(QueryPlaceholders, m[1]) {
			return g, fmt.Errorf("query: unknown placeholder %s; known: {{ %s }}", m[0], strings.Join(QueryPlaceholders, " }}, {{ "))
		}
	}
	if !usesPlaceholder(r.Query, PlaceholderNodes) {
		return g, errors.New("query: must select the wave's nodes with {{ nodes }}, e.g. node=~\"{{ nodes }}\"")
	}
	if r.Max == nil && r.Min == nil {
		return g, errors.New("set max, min or both")
	}
	for _, b := range []*float64{r.Max, r.Min} {
		if b != nil && (math.IsNaN(*b) || math.IsInf(*b, 0)) {
			return g, errors.New("max and min must be finite numbers")
		}
	}
	if r.Max != nil && r.Min != nil && *r.Min > *r.Max {
		return g, fmt.Errorf("min %v is above max %v", *r.Min, *r.Max)
	}
	if r.Interval != nil {
		d, err := time.ParseDuration(*r.Interval)
		if err != nil || d < MinGateInterval || d > MaxGateInterval {
			return g, fmt.Errorf("interval %q: must be a Go duration from %s to %s", *r.Interval, MinGateInterval, MaxGateInterval)
		}
		g.Interval = d
	}
	if r.Count != nil {
		if *r.Count < 1 || *r.Count > MaxGateCount {
			return g, fmt.Errorf("count %d: must be from 1 to %d", *r.Count, MaxGateCount)
		}
		g.Count = *r.Count
	}
	if r.NodeLabel != nil {
		if !labelName.MatchString(*r.NodeLabel) {
			return g, fmt.Errorf("nodeLabel %q: must be a Prometheus label name", *r.NodeLabel)
		}
		g.NodeLabel = *r.NodeLabel
	}
	return g, nil
}

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func usesPlaceholder(query, name string) bool {
	for _, m := range placeholder.FindAllStringSubmatch(query, -1) {
		if m[1] == name {
			return true
		}
	}
	return false
}

// ParseOnAnalysisFailure reads AnnotationOnAnalysisFailure: true for "rollback".
func ParseOnAnalysisFailure(v string) (rollback bool, err error) {
	switch v {
	case "", OnAnalysisFailureHalt:
		return false, nil
	case OnAnalysisFailureRollback:
		return true, nil
	}
	return false, fmt.Errorf("%s %q: must be %q or %q", AnnotationOnAnalysisFailure, v, OnAnalysisFailureHalt, OnAnalysisFailureRollback)
}

// AnalysisStatus is StatusAnalysis: the controller's memory of the analysis across restarts and
// its report to `daemonguard rollout status`.
type AnalysisStatus struct {
	// VerifiedAt is when the last wave passed (or the rollout of the revision began): a node
	// whose new pod became Ready at or after it belongs to the next wave.
	VerifiedAt time.Time `json:"verifiedAt,omitzero"`
	// Wave is how many nodes the analysis under way measures; 0 when none is under way. A wave
	// that grows or shrinks starts its measurements again.
	Wave int `json:"wave,omitempty"`
	// NothingReplaced says the revision's rollout began with no pod of another revision (the
	// DaemonSet's first revision): there is nothing to compare and no wave to measure.
	NothingReplaced bool `json:"nothingReplaced,omitempty"`
	// Gates are the gates' progress on the wave and their last measurements, in gate order.
	Gates []GateStatus `json:"gates,omitempty"`
}

// GateStatus is one gate's progress on the wave under way.
type GateStatus struct {
	Name   string    `json:"name"`
	Passed int       `json:"passed,omitempty"` // measurements passed in a row on this wave
	Next   time.Time `json:"next,omitzero"`    // when the next measurement is due
	// Inconclusive counts the inconclusive measurements in a row on this wave: the gate holds the
	// rollout paused while it is above 0, and the wait for its next measurement doubles with it.
	Inconclusive int `json:"inconclusive,omitempty"`
	// Last is the gate's last measurement, of this wave or an earlier one.
	Last *GateMeasurement `json:"last,omitempty"`
}

// Results of a gate's measurement.
const (
	MeasurementPassed       = "Passed"
	MeasurementFailed       = "Failed"
	MeasurementInconclusive = "Inconclusive"
)

// GateMeasurement is one measurement of a gate: when, its result and what it saw.
type GateMeasurement struct {
	At     time.Time `json:"at"`
	Result string    `json:"result"`
	// Message names the nodes and their values (the first few, a count of the rest) and the
	// bound, or why there was no result.
	Message string `json:"message"`
}

// encodeAnalysis renders a as StatusAnalysis's value; "" when there is nothing to keep.
func encodeAnalysis(a *AnalysisStatus) string {
	if a == nil || (a.VerifiedAt.IsZero() && a.Wave == 0 && !a.NothingReplaced && len(a.Gates) == 0) {
		return ""
	}
	b, err := json.Marshal(normalised(*a))
	if err != nil {
		return "" // plain data of strings, numbers and times always marshals
	}
	return string(b)
}

// decodeAnalysis reads StatusAnalysis's value as encodeAnalysis would have written it: times in
// UTC (see normalised), and nil for an analysis with nothing in it, so that what is read is
// what the controller writes back unchanged.
func decodeAnalysis(v string) (*AnalysisStatus, error) {
	var a AnalysisStatus
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		return nil, err
	}
	if a = normalised(a); encodeAnalysis(&a) == "" {
		return nil, nil
	}
	return &a, nil
}

// normalised is a as the annotation holds it: times in UTC, no empty list; a is not modified.
// VerifiedAt is to the second, as the pods' Ready times it is compared with (a pod Ready later in
// the same second must count in the next wave). The measurements' times are to the millisecond:
// a gate's next measurement rounded down would come up to a second early (before a 1s interval
// has passed), and rounded up a second late on every wave.
func normalised(a AnalysisStatus) AnalysisStatus {
	milli := func(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }
	a.VerifiedAt = a.VerifiedAt.UTC().Truncate(time.Second)
	if len(a.Gates) == 0 {
		a.Gates = nil
	}
	a.Gates = slices.Clone(a.Gates)
	for i := range a.Gates {
		g := &a.Gates[i]
		g.Next = milli(g.Next)
		if g.Last != nil {
			last := *g.Last
			last.At = milli(last.At)
			g.Last = &last
		}
	}
	return a
}
