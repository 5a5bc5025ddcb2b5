package loadgen

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of sorted by the nearest-rank method: the
// smallest value such that at least p percent of the values are less than or equal to it. It
// returns 0 for no values. sorted must be in ascending order.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Summary is the distribution of a set of durations.
type Summary struct {
	P50, P90, P99, Max time.Duration
}

// Summarize sorts d in place and summarises it.
func Summarize(d []time.Duration) Summary {
	slices.Sort(d)
	return Summary{P50: Percentile(d, 50), P90: Percentile(d, 90), P99: Percentile(d, 99), Max: Percentile(d, 100)}
}

// Ratio is a/b, or NaN when b is zero.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}
