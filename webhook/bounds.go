package webhook

// This file bounds the policy evaluations of the DaemonSet webhooks, whoever sends the review:
// the API server, or anyone on the pod network who can reach the port. The server, not the
// caller, sets each evaluation's deadline (boundRequest); an evaluation stops when its client
// hangs up, but not when the replica is stopping; a review beyond the limit of concurrent
// evaluations waits for one to end, briefly and in a queue of bounded length, and beyond that, or
// while the heap is over its limit, is answered by the failure mode (gate); and evaluations in
// flight are cancelled when the heap passes that limit (the gate's watchdog).

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// Bounds bound the policy evaluations of the DaemonSet webhooks. A zero field takes
// DefaultBounds' value.
type Bounds struct {
	// Timeout caps every evaluation, whatever the review's `timeout` query parameter asks; a
	// shorter one still shortens it. It must be below the webhook configurations' timeoutSeconds,
	// so that the failure mode answers before the API server gives up on the webhook and its
	// failurePolicy decides instead.
	Timeout time.Duration
	// MaxConcurrent is how many evaluations may run at once; a review beyond it waits for one to
	// end (MaxWaiting).
	MaxConcurrent int
	// MaxWaiting is how many reviews may wait for an evaluation to end, in the order they came,
	// each at most a quarter of Timeout; a review beyond it, or one that waited that long, is
	// answered by the failure mode. Negative: none waits.
	MaxWaiting int
	// HeapLimit is the size of the heap (bytes of heap objects) past which the evaluations in
	// flight are cancelled and new ones refused, each answered by the failure mode, until the heap
	// is back under it.
	HeapLimit uint64
}

// DefaultBounds are the webhook's bounds unless its flags say otherwise.
//
// Timeout: the chart's timeoutSeconds is 5; one second is left for TLS, the network and the
// answer.
//
// MaxConcurrent: an evaluation is CPU-bound and takes milliseconds for the chart's objects, so
// beyond a few per CPU, more at once only make each slower; and they raise the heap together. A
// review the API server can send (objects of up to 1.5 MiB) grows the heap by at most 40 MiB
// while it is answered (TestWorstCaseReviewsDoNotMoveTheHeap; about 10 MiB for one object, 23
// for an UPDATE with two): 8 of them at once stay under HeapLimit, and 8 answer thousands of
// reviews a second. Bodies near the 7 MiB limit that only a client on the pod network sends can
// take up to 256 MiB each; the heap watchdog, not this number, bounds those. GOMAXPROCS is not
// the measure: with no CPU limit (the chart sets none) it is the node's CPU count, and the heap
// does not grow with it.
//
// MaxWaiting: a burst (Argo CD syncing many DaemonSets, the API server retrying after a
// replica left) would otherwise be denied beyond 8 at once although the evaluations ahead end
// within milliseconds. A waiting review holds only the request the server already read, and the
// heap watchdog counts it; 16 API-server reviews hold at most 16 × 3 MiB (an UPDATE's two
// objects at etcd's limit). A quarter of Timeout leaves the evaluation most of its deadline;
// under an overload that lasts, each waits that long and is then refused, rather than the queue
// growing.
//
// HeapLimit: three quarters of the chart's webhook memory limit (512Mi), the same reasoning as
// policy.DefaultLimits' heap budget: the last quarter is the Go runtime's own (stacks, metadata,
// spans freed but not yet returned) and headroom for what evaluations allocate between two
// samples, so a replica refuses reviews rather than being OOM-killed, which would fail every
// DaemonSet write its peers cannot take. The heap in steady state (the policy set, the node and
// namespace caches) is a small part of it.
var DefaultBounds = Bounds{Timeout: 4 * time.Second, MaxConcurrent: 8, MaxWaiting: 16, HeapLimit: 384 << 20}

// orDefaults is b with each zero field set to DefaultBounds'.
func (b Bounds) orDefaults() Bounds {
	d := DefaultBounds
	if b.Timeout > 0 {
		d.Timeout = b.Timeout
	}
	if b.MaxConcurrent > 0 {
		d.MaxConcurrent = b.MaxConcurrent
	}
	switch {
	case b.MaxWaiting > 0:
		d.MaxWaiting = b.MaxWaiting
	case b.MaxWaiting < 0:
		d.MaxWaiting = 0
	}
	if b.HeapLimit > 0 {
		d.HeapLimit = b.HeapLimit
	}
	return d
}

// errClientGone ends an evaluation whose client hung up: nobody reads its answer.
var errClientGone = errors.New("the client closed the request")

// boundRequest gives each review its evaluation's context: it ends at the server's deadline
// (Bounds.Timeout, or the API server's own `timeout` when shorter) or when the client hangs up,
// and it outlives the server's shutdown.
//
// controller-runtime's webhook server derives every request's context from its own, which ends
// when a replica that is stopping (a rollout, a drain, helm upgrade) shuts its server down: a
// review in flight would then be answered "could not evaluate its policies: context canceled",
// with failure mode deny a valid DaemonSet write refused. The server's graceful shutdown waits
// for these handlers, and the deadline bounds them. net/http also ends a request's context when
// its client hangs up; the two are told apart by Handlers.Stopping, which the process sets
// before it shuts its server down.
func (h *Handlers) boundRequest(next http.Handler) http.Handler {
	limit := h.Bounds.orDefaults().Timeout
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		timeout := limit
		if d, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && d > 0 && d < timeout {
			timeout = d
		}
		ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
		defer cancel(nil)
		stop := context.AfterFunc(r.Context(), func() {
			if h.Stopping == nil || !h.Stopping() {
				cancel(errClientGone)
			}
		})
		defer stop()
		ctx, cancelTimeout := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the evaluation deadline of %s passed", timeout))
		defer cancelTimeout()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Reasons a review is refused or cancelled by a bound (daemonguard_admission_rejected_total).
const (
	rejectedConcurrency = "concurrency"
	rejectedMemory      = "memory"
)

// boundError is a review refused or an evaluation cancelled by a bound; the failure mode
// answers it.
type boundError struct {
	reason string // rejectedConcurrency or rejectedMemory
	msg    string
}

func (e *boundError) Error() string { return e.msg }

// heapSampleInterval is how often the watchdog reads the heap while evaluations run, as the
// policy load's guard does; a reading takes a microsecond or two and does not stop the world.
const heapSampleInterval = 2 * time.Millisecond

// gate admits evaluations within Bounds.MaxConcurrent while the heap is under Bounds.HeapLimit;
// up to Bounds.MaxWaiting more wait, first come first admitted, each for a slot handed over when
// an evaluation ends. One gate serves both DaemonSet webhooks of a process, and its watchdog is
// the process's one heap sampler for admission: it runs only while evaluations do (or while the
// heap is over).
//
// Invariants, under mu: running ≤ max; a review waits only while running == max (a slot freed
// goes to the first waiting review, so running does not drop while any waits); len(waiting) ≤
// maxWaiting; while tripped nothing waits.
type gate struct {
	max, maxWaiting int
	wait            time.Duration // the longest a review waits
	limit           uint64
	busy, over      *boundError
	full, late      *boundError
	log             logr.Logger

	// heap reads the heap's size now: policy.HeapBytes. A test seam, so that tests trip the
	// watchdog without allocating the limit.
	heap func() uint64
	// collect runs a garbage collection: runtime.GC. A test seam.
	collect func()

	mu       sync.Mutex
	running  int                // evaluations admitted and not yet done
	waiting  []chan *boundError // reviews waiting, first come first; each is sent nil when admitted
	sampling bool               // the watchdog runs
	tripped  bool               // the heap is over the limit
	// trip ends, with the memory boundError as its cause, when the heap passes the limit; every
	// evaluation admitted meanwhile is cancelled with it. A new one replaces it when the heap is
	// back under.
	trip       context.Context
	cancelTrip context.CancelCauseFunc
}

func newGate(b Bounds, log logr.Logger) *gate {
	b = b.orDefaults()
	g := &gate{
		max: b.MaxConcurrent, maxWaiting: b.MaxWaiting, wait: b.Timeout / 4, limit: b.HeapLimit, log: log,
		heap: policy.HeapBytes, collect: runtime.GC,
	}
	g.busy = &boundError{reason: rejectedConcurrency, msg: fmt.Sprintf(
		"the webhook is already evaluating %d reviews, its limit (--max-concurrent-evaluations)", g.max)}
	g.full = &boundError{reason: rejectedConcurrency, msg: fmt.Sprintf(
		"the webhook is already evaluating %d reviews, its limit (--max-concurrent-evaluations), and %d more wait (--max-waiting-evaluations)", g.max, g.maxWaiting)}
	g.late = &boundError{reason: rejectedConcurrency, msg: fmt.Sprintf(
		"the webhook was evaluating %d reviews, its limit (--max-concurrent-evaluations), and none of them ended within %s", g.max, g.wait)}
	g.over = &boundError{reason: rejectedMemory, msg: fmt.Sprintf(
		"the webhook's heap is over its limit of %d MiB for evaluations (--evaluation-heap-limit)", g.limit>>20)}
	g.trip, g.cancelTrip = context.WithCancelCause(context.Background())
	return g
}

// enter admits an evaluation under ctx, waiting for a slot if need be, or refuses it with a
// *boundError. An admitted one runs under the returned context, which the watchdog cancels when
// the heap passes the limit, and must call done when it ends.
func (g *gate) enter(ctx context.Context) (context.Context, func(), error) {
	g.mu.Lock()
	switch {
	case g.tripped:
		g.mu.Unlock()
		return nil, nil, g.over
	case g.running < g.max:
		g.running++
	case len(g.waiting) >= g.maxWaiting:
		g.mu.Unlock()
		if g.maxWaiting == 0 {
			return nil, nil, g.busy
		}
		return nil, nil, g.full
	default:
		if err := g.await(ctx); err != nil {
			return nil, nil, err
		}
		g.mu.Lock()
	}
	trip := g.trip
	if !g.sampling {
		g.sampling = true
		go g.watch()
	}
	g.mu.Unlock()
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(trip, func() { cancel(context.Cause(trip)) })
	return ctx, func() {
		stop()
		cancel(nil)
		g.release()
	}, nil
}

// release ends an evaluation: its slot goes to the first review waiting, if any.
func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiting) == 0 {
		g.running--
		return
	}
	first := g.waiting[0]
	g.waiting = g.waiting[1:]
	first <- nil // running stays: the slot changes hands
}

// await queues a review, with mu held (and released), until an evaluation ending hands it its
// slot (nil), the heap passes its limit, g.wait passes or ctx ends.
func (g *gate) await(ctx context.Context) error {
	admitted := make(chan *boundError, 1)
	g.waiting = append(g.waiting, admitted)
	g.mu.Unlock()
	timer := time.NewTimer(g.wait)
	defer timer.Stop()
	var gaveUp *boundError
	select {
	case err := <-admitted:
		if err != nil {
			return err
		}
		return nil // not err: a nil *boundError is a non-nil error
	case <-timer.C:
		gaveUp = g.late
	case <-ctx.Done():
		gaveUp = &boundError{reason: rejectedConcurrency, msg: fmt.Sprintf(
			"the webhook was evaluating %d reviews, its limit (--max-concurrent-evaluations), when the review ended while it waited: %v", g.max, context.Cause(ctx))}
	}
	g.mu.Lock()
	for i, w := range g.waiting {
		if w == admitted {
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			g.mu.Unlock()
			return gaveUp
		}
	}
	g.mu.Unlock()
	// Handed its slot (or refused) as it gave up: take the answer, and give back a slot it got.
	if err := <-admitted; err != nil {
		return err
	}
	g.release()
	return gaveUp
}

// watch samples the heap while evaluations run or the heap is over the limit. Past the limit it
// cancels the evaluations in flight and refuses new ones; once none runs, it collects garbage
// (at most once a second), since what the cancelled evaluations left is counted until a
// collection sweeps it and, with nothing allocating, the next one could be minutes away. Back
// under the limit, it admits again.
func (g *gate) watch() {
	tick := time.NewTicker(heapSampleInterval)
	defer tick.Stop()
	var collected time.Time
	for range tick.C {
		g.mu.Lock()
		if g.running == 0 && !g.tripped {
			g.sampling = false
			g.mu.Unlock()
			return
		}
		tripped, running := g.tripped, g.running
		g.mu.Unlock()
		heap := g.heap()
		switch {
		case !tripped && heap >= g.limit:
			g.mu.Lock()
			g.tripped = true
			g.cancelTrip(g.over)
			for _, w := range g.waiting {
				w <- g.over
			}
			g.waiting = nil
			g.mu.Unlock()
			g.log.Info("Heap passed the evaluation limit: cancelled the evaluations in flight, refusing new ones until it is back under",
				"heapMiB", heap>>20, "limitMiB", g.limit>>20, "cancelled", running)
		case tripped && heap < g.limit:
			g.mu.Lock()
			g.tripped = false
			g.trip, g.cancelTrip = context.WithCancelCause(context.Background())
			g.mu.Unlock()
			g.log.Info("Heap back under the evaluation limit: evaluating again", "heapMiB", heap>>20, "limitMiB", g.limit>>20)
		case tripped && running == 0 && time.Since(collected) >= time.Second:
			g.collect()
			collected = time.Now()
		}
	}
}

var rejectedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "daemonguard_admission_rejected_total",
	Help: "DaemonSet reviews refused or cancelled by a bound of the webhook and answered by the failure mode, by reason: concurrency (over --max-concurrent-evaluations), memory (the heap over --evaluation-heap-limit).",
}, []string{"reason"})

// countBound counts err in rejectedTotal when a bound caused it.
func countBound(err error) {
	var b *boundError
	if errors.As(err, &b) {
		rejectedTotal.WithLabelValues(b.reason).Inc()
	}
}
