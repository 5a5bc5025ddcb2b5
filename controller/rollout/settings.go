package rollout

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Settings are the parsed setting annotations of a managed DaemonSet.
type Settings struct {
	MaxUnavailable   intstr.IntOrString
	Steps            []rolloutapi.Step
	Paused           bool
	ResumeToken      string
	ProgressDeadline time.Duration
	TopologyKey      string
}

// Defaults for settings a DaemonSet leaves out.
const (
	DefaultProgressDeadline = 10 * time.Minute
)

// ParseSettings reads the setting annotations. The admission webhook rejects malformed values,
// so an error here means a DaemonSet admitted while the webhook was bypassed; the controller
// reports it and does nothing.
func ParseSettings(annotations map[string]string) (Settings, error) {
	s := Settings{
		MaxUnavailable:   intstr.FromInt32(1),
		Paused:           annotations[rolloutapi.AnnotationPaused] == "true",
		ResumeToken:      annotations[rolloutapi.AnnotationResume],
		ProgressDeadline: DefaultProgressDeadline,
		TopologyKey:      annotations[rolloutapi.AnnotationTopologyKey],
	}
	if v, ok := annotations[rolloutapi.AnnotationMaxUnavailable]; ok {
		mu := intstr.Parse(v)
		if mu.Type == intstr.Int && mu.IntVal < 1 {
			return s, fmt.Errorf("%s %q: must be at least 1", rolloutapi.AnnotationMaxUnavailable, v)
		}
		if mu.Type == intstr.String {
			p, err := strconv.Atoi(strings.TrimSuffix(v, "%"))
			if !strings.HasSuffix(v, "%") || err != nil || p < 1 || p > 100 {
				return s, fmt.Errorf("%s %q: must be an integer or a percent from 1%% to 100%%", rolloutapi.AnnotationMaxUnavailable, v)
			}
		}
		s.MaxUnavailable = mu
	}
	steps, err := rolloutapi.ParseSteps(annotations[rolloutapi.AnnotationSteps])
	if err != nil {
		return s, fmt.Errorf("%s: %w", rolloutapi.AnnotationSteps, err)
	}
	s.Steps = steps
	if v, ok := annotations[rolloutapi.AnnotationProgressDeadline]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return s, fmt.Errorf("%s %q: must be a positive Go duration", rolloutapi.AnnotationProgressDeadline, v)
		}
		s.ProgressDeadline = d
	}
	return s, nil
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
