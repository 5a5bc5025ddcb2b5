package rolloutapi

import (
	"fmt"
	"slices"
	"strings"
)

// MaxGates is the most analysis gates a DaemonSet may list: each gate is a Prometheus query made
// with the controller's credentials at every interval. ParseGates refuses more; the
// rollout_annotations policy's max_gates is the same bound at admission (keep the two equal).
const MaxGates = 10

// Size limits of the annotations daemonguard reads, in bytes of the value. Each is a few times
// the largest value that is valid, so that no valid value comes near it, and small enough that
// checking a value costs nothing next to the work it would cause: the admission core refuses an
// object with a value past its limit before any policy runs (admission.AnnotationLimitsPolicy),
// and every parser here refuses it before reading it (CheckAnnotationSize), so that neither the
// policies nor the controller ever parse a value a tenant made huge.
const (
	// limitToken is for enum-like and short values: "managed", "true", "25%", "10m", a resume
	// token (at most 63 characters at admission), a revision hash, an RFC 3339 time, "12/40".
	limitToken = 256
	// limitLabelKey is for a label key: a DNS subdomain prefix (253) + "/" + a name (63) is 317.
	limitLabelKey = 512
	// limitSteps: 100 distinct percent steps "1%,...,100%" are 392 bytes, and each pause
	// ("pause:8760h") between them adds 12; 1 KiB holds any canary a person would write.
	limitSteps = 1 << 10
	// limitReason is for free text a person writes (the on-delete exemption's reason).
	limitReason = 1 << 10
	// limitAnalysis: MaxGates gates, each a PromQL query of up to a kilobyte or so plus its
	// fields (name, max, min, interval, count, nodeLabel, baseline: about 150 bytes of YAML).
	limitAnalysis = 16 << 10
	// limitStatusStep is "<index>/<count>: <step>", a step being at most limitSteps long.
	limitStatusStep = limitSteps + 32
	// limitStatusNextNodes: at most five node names (DNS subdomains, 253 bytes each) and the
	// reason of their order.
	limitStatusNextNodes = 2 << 10
	// limitStatusAnalysis: the analysis of a wave as JSON, with each of MaxGates gates' last
	// measurement, whose message names a few nodes and their values (under 2 KiB each).
	limitStatusAnalysis = 32 << 10
)

// annotationLimits is the one table of the size limits: every annotation daemonguard reads, the
// settings a user writes and the status the controller writes.
var annotationLimits = map[string]int{
	AnnotationRollout:           limitToken,
	AnnotationMaxUnavailable:    limitToken,
	AnnotationSteps:             limitSteps,
	AnnotationPaused:            limitToken,
	AnnotationResume:            limitToken,
	AnnotationProgressDeadline:  limitToken,
	AnnotationTopologyKey:       limitLabelKey,
	AnnotationAnalysis:          limitAnalysis,
	AnnotationOnAnalysisFailure: limitToken,
	AnnotationInject:            limitToken,
	AnnotationOnDeleteExempt:    limitReason,

	StatusRevision:       limitToken,
	StatusStep:           limitStatusStep,
	StatusStepStarted:    limitToken,
	StatusPauseToken:     limitToken,
	StatusUpdated:        limitToken,
	StatusNextNodes:      limitStatusNextNodes,
	StatusProgress:       limitToken,
	StatusFailedRevision: limitToken,
	StatusAnalysis:       limitStatusAnalysis,
}

// Annotations only the admission policies read; defined here so that the size table covers every
// key the rollout_annotations policy knows.
const (
	// AnnotationInject "false" opts a DaemonSet out of injection (admission.OptOutAnnotation).
	AnnotationInject = "daemonguard.io/inject"
	// AnnotationOnDeleteExempt gives the reason an OnDelete DaemonSet is not rolled out by
	// daemonguard (read by the policies).
	AnnotationOnDeleteExempt = "daemonguard.io/on-delete-exempt"
)

// AnnotationLimit is the size limit of an annotation daemonguard reads, in bytes; false for a
// key it does not read.
func AnnotationLimit(key string) (int, bool) {
	n, ok := annotationLimits[key]
	return n, ok
}

// limitedKeys are annotationLimits' keys, sorted, so that the first value past its limit is
// always the same one.
var limitedKeys = func() []string {
	keys := make([]string, 0, len(annotationLimits))
	for k := range annotationLimits {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}()

// LimitedAnnotations are the keys with a size limit, sorted.
func LimitedAnnotations() []string { return slices.Clone(limitedKeys) }

// AnnotationTooLargeError is an annotation value past its size limit.
type AnnotationTooLargeError struct {
	Key         string
	Size, Limit int
}

func (e *AnnotationTooLargeError) Error() string {
	return fmt.Sprintf("annotation %s is %d bytes, over its limit of %d bytes", e.Key, e.Size, e.Limit)
}

// CheckAnnotationSize refuses a value of key past the key's limit with an
// *AnnotationTooLargeError; keys without a limit pass.
func CheckAnnotationSize(key, value string) error {
	if limit, ok := annotationLimits[key]; ok && len(value) > limit {
		return &AnnotationTooLargeError{Key: key, Size: len(value), Limit: limit}
	}
	return nil
}

// CheckAnnotationSizes refuses the first annotation, in key order, whose value is past its limit.
func CheckAnnotationSizes(annotations map[string]string) error {
	return checkSizes(annotations, true)
}

// checkSizes is CheckAnnotationSizes, over the status annotations too when withStatus.
func checkSizes(annotations map[string]string, withStatus bool) error {
	for _, k := range limitedKeys {
		if v, ok := annotations[k]; ok && (withStatus || !strings.HasPrefix(k, StatusPrefix)) {
			if err := CheckAnnotationSize(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}
