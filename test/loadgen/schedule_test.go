package loadgen

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

func TestRequests(t *testing.T) {
	for _, tc := range []struct {
		rate int
		d    time.Duration
		want int
	}{
		{1000, 10 * time.Second, 10000},
		{2000, 10 * time.Second, 20000},
		{500, time.Second, 500},
		{200, 1500 * time.Millisecond, 300},
		{3, 1500 * time.Millisecond, 5}, // 4.5 rounds half away from zero
		{1, 100 * time.Millisecond, 0},
	} {
		if got := Requests(tc.rate, tc.d); got != tc.want {
			t.Errorf("Requests(%d, %v) = %d, want %d", tc.rate, tc.d, got, tc.want)
		}
	}
}

func TestOffsetIsEvenlySpacedWithoutDrift(t *testing.T) {
	for _, rate := range []int{1, 3, 7, 500, 1000, 2000, 3333} {
		n := Requests(rate, 10*time.Second)
		if got := Offset(0, rate); got != 0 {
			t.Errorf("rate %d: first request at %v, want 0", rate, got)
		}
		period := float64(time.Second) / float64(rate)
		prev := time.Duration(-1)
		for i := range n {
			at := Offset(i, rate)
			if at <= prev {
				t.Fatalf("rate %d: request %d at %v, not after request %d at %v", rate, i, at, i-1, prev)
			}
			// Exact up to the nanosecond truncation, however far into the step.
			if want := float64(i) * period; math.Abs(float64(at)-want) >= 1 {
				t.Fatalf("rate %d: request %d at %v, want %.1fns", rate, i, at, want)
			}
			prev = at
		}
		if got := Offset(rate*10, rate); got != 10*time.Second {
			t.Errorf("rate %d: request rate*10 at %v, want exactly 10s", rate, got)
		}
	}
}

// pace is open loop: it starts every request at its due time (never early) and never waits for
// one to finish. Here no request finishes before all have been started.
func TestPaceIsOpenLoop(t *testing.T) {
	const rate, n = 2000, 400 // 200ms
	release := make(chan struct{})
	var (
		mu      sync.Mutex
		order   []int
		early   []int
		started sync.WaitGroup
		done    sync.WaitGroup
	)
	start := time.Now().Add(5 * time.Millisecond)
	started.Add(n)
	finished := make(chan struct{})
	go func() {
		pace(nil, start, n, rate, func(i int, due time.Time) {
			now := time.Now()
			mu.Lock()
			order = append(order, i)
			if now.Before(due) {
				early = append(early, i)
			}
			if want := start.Add(Offset(i, rate)); !due.Equal(want) {
				t.Errorf("request %d due %v, want %v", i, due, want)
			}
			mu.Unlock()
			done.Add(1)
			go func() { // a request that stays in flight until the whole schedule has been sent
				defer done.Done()
				started.Done()
				<-release
			}()
		})
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(30 * time.Second):
		t.Fatal("pace waited for requests in flight (closed loop)")
	}
	started.Wait()
	close(release)
	done.Wait()
	if len(order) != n || !slices.IsSorted(order) || order[n-1] != n-1 {
		t.Errorf("sent %d requests, in order: %v", len(order), slices.IsSorted(order))
	}
	if len(early) > 0 {
		t.Errorf("%d requests sent before their due time, first %v", len(early), early[:min(5, len(early))])
	}
}

func TestPaceStops(t *testing.T) {
	stop := make(chan struct{})
	calls := 0
	sent := pace(stop, time.Now(), 1000, 100, func(i int, _ time.Time) { // 10s of schedule
		if calls++; i == 4 {
			close(stop)
		}
	})
	if sent != 5 || calls != 5 {
		t.Errorf("pace started %d sends (%d calls) after stop at the 5th, want 5", sent, calls)
	}
}

func TestSequenceFollowsTheMixAndIsDeterministic(t *testing.T) {
	cases, err := fixture.Cases()
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	seq, err := Sequence(cases, DefaultMix(), n, 42)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Sequence(cases, DefaultMix(), n, 42)
	if !slices.Equal(seq, again) {
		t.Error("same seed, different sequences")
	}
	other, _ := Sequence(cases, DefaultMix(), n, 43)
	if slices.Equal(seq, other) {
		t.Error("different seeds, same sequence")
	}
	perEndpoint, perCase := map[string]int{}, map[string]int{}
	for _, i := range seq {
		perEndpoint[cases[i].Endpoint]++
		perCase[cases[i].Name]++
	}
	for endpoint, want := range map[string]float64{fixture.MutateDaemonSet: 0.4, fixture.ValidateDaemonSet: 0.4, fixture.MutatePod: 0.2} {
		if got := float64(perEndpoint[endpoint]) / n; math.Abs(got-want) > 0.02 {
			t.Errorf("%s: share %.3f, want %.2f", endpoint, got, want)
		}
	}
	for _, c := range cases { // every variant of an endpoint equally often (2 per endpoint)
		want := float64(perEndpoint[c.Endpoint]) / 2
		if got := float64(perCase[c.Name]); math.Abs(got-want) > 0.1*want {
			t.Errorf("%s: %v requests, want about %v", c.Name, got, want)
		}
	}

	podsOnly, err := Sequence(cases, Mix{fixture.MutatePod: 1}, 1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range podsOnly {
		if cases[i].Endpoint != fixture.MutatePod {
			t.Fatalf("mix of pods only sent %s", cases[i].Name)
		}
	}
}

func TestParseMix(t *testing.T) {
	m, err := ParseMix("mutate-daemonset=40, validate-daemonset=40,mutate-pod=20")
	if err != nil {
		t.Fatal(err)
	}
	if m.String() != DefaultMix().String() {
		t.Errorf("ParseMix = %v, want %v", m, DefaultMix())
	}
	for _, bad := range []string{"", "mutate-pod", "mutate-pod=x", "mutate-pod=-1", "other=1", "mutate-pod=0"} {
		if _, err := ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q): no error", bad)
		}
	}
}
