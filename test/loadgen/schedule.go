package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// Requests is how many requests a step at rate requests/s sends in d: rate*d, rounded.
func Requests(rate int, d time.Duration) int {
	return int(math.Round(float64(rate) * d.Seconds()))
}

// Offset is when request i of a step at rate requests/s is due, relative to the step's start:
// evenly spaced (constant rate), computed exactly so that no rounding error accumulates.
func Offset(i, rate int) time.Duration {
	return time.Duration(int64(i) * int64(time.Second) / int64(rate))
}

// pace calls send(i, due) for i = 0..n-1 as soon as possible after due = start+Offset(i, rate),
// without ever waiting for an earlier send: the schedule is open loop. A send that could not be
// started on time (the pacer fell behind) is started at once, with its original due time, so the
// delay is charged to that request's latency instead of silently stretching the schedule. It
// returns how many sends it started: n, or fewer when stop is closed first.
func pace(stop <-chan struct{}, start time.Time, n, rate int, send func(i int, due time.Time)) int {
	sent := make(chan int)
	go func() {
		precisePacer() // see pace_linux.go: a dedicated thread sleeping with µs precision
		for i := range n {
			due := start.Add(Offset(i, rate))
			if d := time.Until(due); d > 0 {
				sleep(d)
			}
			select {
			case <-stop:
				sent <- i
				return
			default:
			}
			send(i, due)
		}
		sent <- n
	}()
	return <-sent
}

// Mix is the share of requests per endpoint (fixture.MutateDaemonSet, ...), in any unit.
type Mix map[string]float64

// DefaultMix sends 40% mutate-daemonset, 40% validate-daemonset and 20% mutate-pod.
func DefaultMix() Mix {
	return Mix{fixture.MutateDaemonSet: 40, fixture.ValidateDaemonSet: 40, fixture.MutatePod: 20}
}

// ParseMix parses "mutate-daemonset=40,validate-daemonset=40,mutate-pod=20".
func ParseMix(s string) (Mix, error) {
	m := Mix{}
	for part := range strings.SplitSeq(s, ",") {
		name, weight, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("mix entry %q is not endpoint=weight", part)
		}
		w, err := strconv.ParseFloat(weight, 64)
		if err != nil || w < 0 || math.IsInf(w, 0) {
			return nil, fmt.Errorf("mix entry %q: weight must be a non-negative number", part)
		}
		switch name {
		case fixture.MutateDaemonSet, fixture.ValidateDaemonSet, fixture.MutatePod:
		default:
			return nil, fmt.Errorf("mix entry %q: endpoint is not one of %s, %s, %s", part, fixture.MutateDaemonSet, fixture.ValidateDaemonSet, fixture.MutatePod)
		}
		m[name] = w
	}
	total := 0.0
	for _, w := range m {
		total += w
	}
	if total <= 0 {
		return nil, fmt.Errorf("mix %q: weights sum to zero", s)
	}
	return m, nil
}

func (m Mix) String() string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.FormatFloat(m[k], 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// Sequence picks the case (an index into cases) of each of n requests: an endpoint by the mix's
// weights, then one of that endpoint's variants with equal chance. It is deterministic in seed, so
// the null webhook and daemonguard receive exactly the same requests at the same offsets.
func Sequence(cases []fixture.Case, mix Mix, n int, seed uint64) ([]int, error) {
	byEndpoint := map[string][]int{}
	for i, c := range cases {
		byEndpoint[c.Endpoint] = append(byEndpoint[c.Endpoint], i)
	}
	type choice struct {
		upTo     float64
		variants []int
	}
	var choices []choice
	total := 0.0
	for _, endpoint := range []string{fixture.MutateDaemonSet, fixture.ValidateDaemonSet, fixture.MutatePod} {
		w := mix[endpoint]
		if w <= 0 {
			continue
		}
		if len(byEndpoint[endpoint]) == 0 {
			return nil, fmt.Errorf("no request variants for endpoint %s", endpoint)
		}
		total += w
		choices = append(choices, choice{upTo: total, variants: byEndpoint[endpoint]})
	}
	if total <= 0 {
		return nil, fmt.Errorf("empty mix")
	}
	rng := rand.New(rand.NewPCG(seed, 0x6461656d6f6e))
	out := make([]int, n)
	for i := range out {
		x := rng.Float64() * total
		c := choices[len(choices)-1]
		for _, cand := range choices {
			if x < cand.upTo {
				c = cand
				break
			}
		}
		out[i] = c.variants[rng.IntN(len(c.variants))]
	}
	return out, nil
}
