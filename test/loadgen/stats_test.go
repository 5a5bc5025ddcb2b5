package loadgen

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	oneToTen := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	oneToHundred := make([]time.Duration, 100)
	for i := range oneToHundred {
		oneToHundred[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single value is every percentile (p50)", ms(7), 50, 7 * time.Millisecond},
		{"single value is every percentile (p99)", ms(7), 99, 7 * time.Millisecond},
		{"p50 of 1..10 is the 5th value", oneToTen, 50, 5 * time.Millisecond},
		{"p90 of 1..10 is the 9th value", oneToTen, 90, 9 * time.Millisecond},
		{"p99 of 1..10 rounds up to the 10th", oneToTen, 99, 10 * time.Millisecond},
		{"p100 is the max", oneToTen, 100, 10 * time.Millisecond},
		{"a tiny p is the min", oneToTen, 0.1, 1 * time.Millisecond},
		{"p51 of 1..10 rounds up to the 6th", oneToTen, 51, 6 * time.Millisecond},
		{"p99 of 1..100 is the 99th value", oneToHundred, 99, 99 * time.Millisecond},
		{"p99.9 of 1..100 is the max", oneToHundred, 99.9, 100 * time.Millisecond},
		{"p50 of two values is the lower", ms(1, 3), 50, 1 * time.Millisecond},
		{"p50 of four values is the 2nd", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"duplicates", ms(2, 2, 2, 9), 75, 2 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.sorted, tc.p); got != tc.want {
				t.Errorf("Percentile(p%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}

func TestSummarizeSortsItsInput(t *testing.T) {
	d := []time.Duration{9, 1, 5, 3, 7, 2, 8, 4, 6, 10}
	s := Summarize(d)
	if s.P50 != 5 || s.P90 != 9 || s.P99 != 10 || s.Max != 10 {
		t.Errorf("Summarize = %+v", s)
	}
	if Summarize(nil) != (Summary{}) {
		t.Error("empty summary not zero")
	}
}

func TestRatio(t *testing.T) {
	if r := Ratio(3*time.Millisecond, 2*time.Millisecond); r != 1.5 {
		t.Errorf("Ratio = %v", r)
	}
	if r := Ratio(time.Millisecond, 0); !math.IsNaN(r) {
		t.Errorf("Ratio over zero = %v, want NaN", r)
	}
}
