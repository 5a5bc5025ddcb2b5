package rolloutapi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Status is what the status.daemonguard.io/ annotations hold: the rollout controller's memory
// across restarts and its report to the CLI. EncodeStatus writes it and DecodeStatus reads it
// back; a zero field is an absent annotation.
type Status struct {
	Revision       string       // StatusRevision: the revision the rollout is heading to
	Step           StepPosition // StatusStep
	StepStarted    time.Time    // StatusStepStarted, to the second
	PauseToken     string       // StatusPauseToken
	Counts         *Counts      // StatusUpdated; nil when absent
	NextNodes      []string     // StatusNextNodes: the nodes replaced next, in order
	NextReason     string       // StatusNextNodes: why in that order; written only with NextNodes
	FailedRevision string       // StatusFailedRevision
	// Progress is when the updated count last grew and ProgressUpdated that count
	// (StatusProgress, to the second).
	Progress        time.Time
	ProgressUpdated int
	// Analysis is StatusAnalysis; nil when absent.
	Analysis *AnalysisStatus
	// CompletedAt is StatusCompletedAt, to the second: when the revision's rollout first
	// completed, under AnnotationBake; zero otherwise.
	CompletedAt time.Time
}

// Counts is "<updated>/<desired>" nodes: reachable nodes whose pod runs the target revision and
// is available, of the reachable nodes the DaemonSet should run on.
type Counts struct {
	Updated, Desired int
}

// StepPosition is where a rollout is in its steps: StatusStep, "3/5: 25%".
type StepPosition struct {
	Index int    // 0-based index of the current step; Count once every step is done
	Count int    // the number of steps; 0 when unknown
	Spec  string // the current step as written in AnnotationSteps ("25%", "pause:5m"); empty when done
}

// Done tells a position past the last step.
func (p StepPosition) Done() bool { return p.Count > 0 && p.Index >= p.Count }

// Position is the 1-based "<index>/<count>" ("3/5"), "<count>/<count>" when done, "" when unknown.
func (p StepPosition) Position() string {
	if p.Count <= 0 {
		return ""
	}
	return fmt.Sprintf("%d/%d", min(p.Index, p.Count-1)+1, p.Count)
}

// Label is the step as written, or "done" past the last step.
func (p StepPosition) Label() string {
	if p.Done() {
		return "done"
	}
	return p.Spec
}

// String is the StatusStep value: "3/5: 25%", "5/5: done", "" when unknown.
func (p StepPosition) String() string {
	pos, label := p.Position(), p.Label()
	if pos == "" || label == "" {
		return pos
	}
	return pos + ": " + label
}

// statusKeys are the keys EncodeStatus may write, so that StatusChanges can remove stale ones.
var statusKeys = []string{
	StatusRevision, StatusStep, StatusStepStarted, StatusPauseToken, StatusUpdated,
	StatusNextNodes, StatusProgress, StatusFailedRevision, StatusAnalysis, StatusCompletedAt,
}

// EncodeStatus renders s as status annotations; zero fields are left out.
func EncodeStatus(s Status) map[string]string {
	a := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			a[k] = v
		}
	}
	set(StatusRevision, s.Revision)
	set(StatusStep, s.Step.String())
	set(StatusStepStarted, formatTime(s.StepStarted))
	set(StatusPauseToken, s.PauseToken)
	if s.Counts != nil {
		set(StatusUpdated, fmt.Sprintf("%d/%d", s.Counts.Updated, s.Counts.Desired))
	}
	if len(s.NextNodes) > 0 {
		next := strings.Join(s.NextNodes, ",")
		if s.NextReason != "" {
			next += " (" + s.NextReason + ")"
		}
		set(StatusNextNodes, next)
	}
	if !s.Progress.IsZero() || s.ProgressUpdated != 0 {
		set(StatusProgress, fmt.Sprintf("%d@%s", s.ProgressUpdated, s.Progress.UTC().Format(time.RFC3339)))
	}
	set(StatusFailedRevision, s.FailedRevision)
	set(StatusAnalysis, encodeAnalysis(s.Analysis))
	set(StatusCompletedAt, formatTime(s.CompletedAt))
	return a
}

// StatusChanges is the annotation changes that make current hold s: a value sets a key, nil
// removes it. Keys outside status.daemonguard.io/ are never touched; no change gives an empty map.
func StatusChanges(current map[string]string, s Status) map[string]*string {
	want := EncodeStatus(s)
	changes := map[string]*string{}
	for _, k := range statusKeys {
		v, wanted := want[k]
		cur, present := current[k]
		switch {
		case !wanted && present:
			changes[k] = nil
		case wanted && (!present || cur != v):
			changes[k] = &v
		}
	}
	return changes
}

// DecodeStatus reads the status annotations. A malformed value is left out of the result and
// named in the error; the rest is decoded all the same, so a reader can go on with what it has.
//
// A value past its size limit (CheckAnnotationSize) is refused the same way, unread.
func DecodeStatus(a map[string]string) (Status, error) {
	var errs []error
	for _, k := range statusKeys {
		if err := CheckAnnotationSize(k, a[k]); err != nil {
			errs = append(errs, err)
			a = withoutKey(a, k)
		}
	}
	s := Status{Revision: a[StatusRevision], PauseToken: a[StatusPauseToken], FailedRevision: a[StatusFailedRevision]}
	fail := func(key, why string) { errs = append(errs, fmt.Errorf("%s %q: %s", key, a[key], why)) }
	if v, ok := a[StatusStep]; ok {
		p, err := parseStepPosition(v)
		if err != nil {
			fail(StatusStep, err.Error())
		}
		s.Step = p
	}
	readTime := func(key string, t *time.Time) {
		if v, ok := a[key]; ok {
			if at, err := parseTime(v); err != nil {
				fail(key, "want an RFC 3339 time")
			} else {
				*t = at
			}
		}
	}
	readTime(StatusStepStarted, &s.StepStarted)
	if v, ok := a[StatusUpdated]; ok {
		if u, d, ok := parseFraction(v); ok {
			s.Counts = &Counts{Updated: u, Desired: d}
		} else {
			fail(StatusUpdated, `want "<updated>/<desired>"`)
		}
	}
	if v, ok := a[StatusNextNodes]; ok {
		s.NextNodes, s.NextReason = parseNextNodes(v)
	}
	if v, ok := a[StatusProgress]; ok {
		n, at, found := strings.Cut(v, "@")
		count, err1 := strconv.Atoi(n)
		t, err2 := parseTime(at)
		if !found || err1 != nil || err2 != nil || count < 0 {
			fail(StatusProgress, `want "<updated>@<RFC 3339 time>"`)
		} else {
			s.ProgressUpdated, s.Progress = count, t
		}
	}
	if v, ok := a[StatusAnalysis]; ok {
		analysis, err := decodeAnalysis(v)
		if err != nil {
			fail(StatusAnalysis, "want the analysis as JSON: "+err.Error())
		}
		s.Analysis = analysis
	}
	readTime(StatusCompletedAt, &s.CompletedAt)
	return s, errors.Join(errs...)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// parseTime reads an RFC 3339 time as formatTime would have written it: in UTC, to the second.
// A hand-written offset or fraction of a second is accepted, and the status read is one the
// controller can write back unchanged.
func parseTime(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	return t.UTC().Truncate(time.Second), err
}

// parseStepPosition reads "3/5: 25%", "5/5: done" or "3/5".
func parseStepPosition(v string) (StepPosition, error) {
	pos, label, _ := strings.Cut(v, ":")
	label = strings.TrimSpace(label)
	i, n, ok := parseFraction(pos)
	if !ok || i < 1 || i > n {
		return StepPosition{}, errors.New(`want "<index>/<count>: <step>" with 1 <= index <= count`)
	}
	if label == "done" {
		return StepPosition{Index: n, Count: n}, nil
	}
	return StepPosition{Index: i - 1, Count: n, Spec: label}, nil
}

// parseNextNodes splits "worker-3,worker-4 (why in that order)" into the nodes and the reason. A
// value without a reason is all nodes; the reason may hold parentheses itself. A reason without
// nodes is dropped, as EncodeStatus drops it.
func parseNextNodes(v string) (nodes []string, reason string) {
	v = strings.TrimSpace(v)
	if i := strings.Index(v, " ("); i >= 0 && strings.HasSuffix(v, ")") {
		v, reason = v[:i], v[i+2:len(v)-1]
	}
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return nil, ""
	}
	return nodes, reason
}

// parseFraction reads "<a>/<b>" of non-negative integers.
func parseFraction(v string) (a, b int, ok bool) {
	l, r, found := strings.Cut(strings.TrimSpace(v), "/")
	if !found {
		return 0, 0, false
	}
	x, err1 := strconv.ParseInt(strings.TrimSpace(l), 10, 32)
	y, err2 := strconv.ParseInt(strings.TrimSpace(r), 10, 32)
	if err1 != nil || err2 != nil || x < 0 || y < 0 {
		return 0, 0, false
	}
	return int(x), int(y), true
}

// withoutKey is a copy of a without k; a is not modified.
func withoutKey(a map[string]string, k string) map[string]string {
	out := make(map[string]string, len(a))
	for key, v := range a {
		if key != k {
			out[key] = v
		}
	}
	return out
}
