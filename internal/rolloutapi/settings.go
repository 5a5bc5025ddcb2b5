package rolloutapi

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Settings are the parsed setting annotations of a managed DaemonSet.
type Settings struct {
	MaxUnavailable   intstr.IntOrString
	Steps            []Step
	Paused           bool
	ResumeToken      string
	ProgressDeadline time.Duration
	TopologyKey      string
	// Gates are the analysis gates (AnnotationAnalysis); none without the annotation.
	Gates []Gate
	// RollbackOnAnalysisFailure is AnnotationOnAnalysisFailure "rollback".
	RollbackOnAnalysisFailure bool
	// Bake is AnnotationBake; 0 without the annotation (no bake).
	Bake time.Duration
}

// DefaultProgressDeadline bounds each step of a DaemonSet without AnnotationProgressDeadline.
const DefaultProgressDeadline = 10 * time.Minute

// ParseSettings reads the setting annotations. The admission webhook rejects malformed values,
// so an error here means a DaemonSet admitted while the webhook was bypassed; the controller
// reports it and does nothing.
//
// A value past its size limit (CheckAnnotationSize) is refused before any is read.
func ParseSettings(annotations map[string]string) (Settings, error) {
	if err := checkSizes(annotations, false); err != nil {
		return Settings{MaxUnavailable: intstr.FromInt32(1), ProgressDeadline: DefaultProgressDeadline}, err
	}
	s := Settings{
		MaxUnavailable:   intstr.FromInt32(1),
		Paused:           annotations[AnnotationPaused] == "true",
		ResumeToken:      annotations[AnnotationResume],
		ProgressDeadline: DefaultProgressDeadline,
		TopologyKey:      annotations[AnnotationTopologyKey],
	}
	if v, ok := annotations[AnnotationMaxUnavailable]; ok {
		mu := intstr.Parse(v)
		if mu.Type == intstr.Int && mu.IntVal < 1 {
			return s, fmt.Errorf("%s %q: must be at least 1", AnnotationMaxUnavailable, v)
		}
		if mu.Type == intstr.String {
			p, err := strconv.Atoi(strings.TrimSuffix(v, "%"))
			if !strings.HasSuffix(v, "%") || err != nil || p < 1 || p > 100 {
				return s, fmt.Errorf("%s %q: must be an integer or a percent from 1%% to 100%%", AnnotationMaxUnavailable, v)
			}
		}
		s.MaxUnavailable = mu
	}
	steps, err := ParseSteps(annotations[AnnotationSteps])
	if err != nil {
		return s, fmt.Errorf("%s: %w", AnnotationSteps, err)
	}
	s.Steps = steps
	if v, ok := annotations[AnnotationProgressDeadline]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("%s %q: must be a positive Go duration", AnnotationProgressDeadline, v)
		}
		s.ProgressDeadline = d
	}
	if v, ok := annotations[AnnotationBake]; ok {
		if s.Bake, err = ParseBake(v); err != nil {
			return s, err
		}
	}
	if s.Gates, err = ParseGates(annotations[AnnotationAnalysis]); err != nil {
		return s, fmt.Errorf("%s: %w", AnnotationAnalysis, err)
	}
	if s.RollbackOnAnalysisFailure, err = ParseOnAnalysisFailure(annotations[AnnotationOnAnalysisFailure]); err != nil {
		return s, err
	}
	return s, nil
}

// ParseBake reads AnnotationBake: a Go duration above 0 and at most MaxBake.
func ParseBake(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || d > MaxBake {
		return 0, fmt.Errorf("%s %q: must be a Go duration above 0s and at most %gh (e.g. \"10m\")", AnnotationBake, v, MaxBake.Hours())
	}
	return d, nil
}

// ResolveMaxUnavailable turns the budget into a node count against desired, rounding a percent up
// as the upstream DaemonSet controller does; the result is at least 1 so a rollout can progress.
func ResolveMaxUnavailable(v intstr.IntOrString, desired int) int {
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, desired, true)
	if err != nil || n < 1 {
		return 1
	}
	return n
}

// StepKind is what a canary step does.
type StepKind int

// Step kinds.
const (
	StepNodes      StepKind = iota // update until Value nodes run the new revision
	StepPercent                    // update until Value percent of the desired nodes do (rounded up)
	StepPause                      // wait until resumed (AnnotationResume changes)
	StepTimedPause                 // wait for Duration
)

// Step is one canary step of AnnotationSteps.
type Step struct {
	Kind     StepKind
	Value    int
	Duration time.Duration
	Text     string // as written, for status messages
}

// Target is how many updated nodes the step asks for out of desired; pauses ask for none.
func (s Step) Target(desired int) int {
	switch s.Kind {
	case StepNodes:
		return min(s.Value, desired)
	case StepPercent:
		return int(math.Ceil(float64(desired) * float64(s.Value) / 100))
	}
	return 0
}

// IsPause tells the two pause kinds.
func (s Step) IsPause() bool { return s.Kind == StepPause || s.Kind == StepTimedPause }

// ParseSteps reads AnnotationSteps. Empty means a single "100%" step. The last step that is not
// a pause must update every node, or the rollout could never complete.
//
// The rollout_annotations admission policy checks the same syntax, more strictly (steps must not
// decrease, bounded durations), so that a user meets the error at admission; this parser is the
// controller's guard for DaemonSets admitted while the webhook was bypassed.
func ParseSteps(v string) ([]Step, error) {
	if err := CheckAnnotationSize(AnnotationSteps, v); err != nil {
		return nil, err
	}
	if strings.TrimSpace(v) == "" {
		return []Step{{Kind: StepPercent, Value: 100, Text: "100%"}}, nil
	}
	var steps []Step
	for _, raw := range strings.Split(v, ",") {
		text := strings.TrimSpace(raw)
		switch {
		case text == "pause":
			steps = append(steps, Step{Kind: StepPause, Text: text})
		case strings.HasPrefix(text, "pause:"):
			d, err := time.ParseDuration(strings.TrimPrefix(text, "pause:"))
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("step %q: pause needs a positive Go duration such as pause:5m", text)
			}
			steps = append(steps, Step{Kind: StepTimedPause, Duration: d, Text: text})
		case strings.HasSuffix(text, "%"):
			n, err := strconv.Atoi(strings.TrimSuffix(text, "%"))
			if err != nil || n < 1 || n > 100 {
				return nil, fmt.Errorf("step %q: a percent step is 1%% to 100%%", text)
			}
			steps = append(steps, Step{Kind: StepPercent, Value: n, Text: text})
		default:
			n, err := strconv.Atoi(text)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("step %q: expected a node count, a percent, pause or pause:<duration>", text)
			}
			steps = append(steps, Step{Kind: StepNodes, Value: n, Text: text})
		}
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i].IsPause() {
			continue
		}
		if steps[i].Kind != StepPercent || steps[i].Value != 100 {
			return nil, fmt.Errorf("the last step that is not a pause must be 100%%, got %q", steps[i].Text)
		}
		return steps, nil
	}
	return nil, fmt.Errorf("steps %q update no node", v)
}
