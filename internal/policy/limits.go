package policy

// This file bounds a policy set's load: parsing, compiling, the enforcement rules and the trial
// evaluation (trial.go) run under a deadline and a heap budget, so a ConfigMap with an exploding
// comprehension is rejected like a broken one instead of taking a replica's CPU or memory.

import (
	"context"
	"errors"
	"fmt"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// Limits bound the load of one policy set.
type Limits struct {
	// Timeout bounds the whole load; 0 means DefaultLimits.Timeout.
	Timeout time.Duration
	// HeapBudget is how many bytes the heap may grow by during the load; 0 means
	// DefaultLimits.HeapBudget.
	HeapBudget uint64
}

// DefaultLimits are the webhook's limits unless --policy-load-timeout says otherwise, and the
// CLI's. The built-in set loads in well under a second and a few MiB. The heap budget is half of
// the chart's webhook memory limit (512Mi): the other half holds the set in force, the informers'
// caches, admission in flight and the Go runtime, so a replica that rejects an exploding set stays
// within its limit rather than being OOM-killed, which would take the set in force down with it.
var DefaultLimits = Limits{Timeout: 10 * time.Second, HeapBudget: 256 << 20}

func (l Limits) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout
	}
	return DefaultLimits.Timeout
}

func (l Limits) heapBudget() uint64 {
	if l.HeapBudget > 0 {
		return l.HeapBudget
	}
	return DefaultLimits.HeapBudget
}

// LimitError is a load stopped by its deadline or its heap budget. The set is rejected like one
// that does not compile.
type LimitError struct {
	// Limit says which limit, e.g. "the load deadline of 10s".
	Limit string
	// While says what the load was doing, e.g. "evaluating the enforcement rules".
	While string
	// At is where evaluation was when it stopped (a module, as configmap/NAME/KEY or a path, and a
	// line), so the error blames the ConfigMap at fault; nil while compiling.
	At *ast.Location
}

func (e *LimitError) Error() string {
	msg := fmt.Sprintf("policy set exceeded %s while %s", e.Limit, e.While)
	if e.At != nil {
		msg += fmt.Sprintf(" at %s:%d", e.At.File, e.At.Row)
	}
	return msg
}

// loadSlot lets one load run at a time in a process, so that the heap budget bounds what loads
// add to the heap together (the reloader, the in-process injection check and the startup compile
// could otherwise overlap) and two loads do not trip each other's guard.
var loadSlot = make(chan struct{}, 1)

// heapObjects is the runtime/metrics name of the bytes of heap objects, live or not yet swept:
// what the heap holds now, not only what survived the last GC.
const heapObjects = "/memory/classes/heap/objects:bytes"

// HeapBytes is the size of the process's heap now (heapObjects), the reading both the load's
// guard (guardHeap) and admission's watchdog (package webhook) act on. It does not stop the
// world and takes a microsecond or two.
func HeapBytes() uint64 {
	sample := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}

// heapGuardInterval is how often the guard samples the heap; reading the metric takes a
// microsecond or two and does not stop the world.
const heapGuardInterval = 2 * time.Millisecond

// guardHeap samples the heap until stop is called and calls trip, once, when it has grown by
// three quarters of budget since the guard started. The last quarter is headroom for what is
// allocated between a sample and the evaluation noticing the cancellation (OPA checks between
// expressions, and numbers.range within its loop).
func guardHeap(budget uint64, trip func()) (stop func()) {
	threshold := budget / 4 * 3
	base := HeapBytes()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(heapGuardInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if now := HeapBytes(); now > base && now-base >= threshold {
				trip()
				return
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// whereTracer remembers the last located step of an evaluation, so that a load stopped by a
// limit can name the module and line it was in. It asks OPA for no variable bindings: each step
// costs a pointer store.
type whereTracer struct{ last atomic.Pointer[ast.Location] }

func (t *whereTracer) Enabled() bool { return true }

func (t *whereTracer) Config() topdown.TraceConfig { return topdown.TraceConfig{} }

func (t *whereTracer) TraceEvent(e topdown.Event) {
	if e.Location != nil && e.Location.File != "" {
		t.last.Store(e.Location)
	}
}

// bounded runs load under l: it waits for the process's load slot (as long as ctx allows), then
// runs load with a context that ends at the deadline or when the heap guard trips. load reports
// what it is doing through the step function it is given; when a limit stopped it, the error is a
// *LimitError saying which limit and what it was doing, instead of load's own. load runs in a
// goroutine of its own because OPA's compiler takes no context: when the deadline passes in the
// middle of a compiler stage, bounded returns at once, and the abandoned load stops at the end of
// that stage and only then frees the slot.
func bounded[T any](ctx context.Context, l Limits, load func(ctx context.Context, step func(string, *whereTracer)) (T, error)) (T, error) {
	var zero T
	select {
	case loadSlot <- struct{}{}:
	case <-ctx.Done():
		return zero, fmt.Errorf("wait for another policy set load to finish: %w", context.Cause(ctx))
	}
	var (
		deadline = fmt.Errorf("the load deadline of %s", l.timeout())
		budget   = fmt.Errorf("the load memory budget of %d MiB", l.heapBudget()>>20)
	)
	ctx, cancelTimeout := context.WithTimeoutCause(ctx, l.timeout(), deadline)
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopGuard := guardHeap(l.heapBudget(), func() { cancel(budget) })

	type progress struct {
		while string
		where *whereTracer
	}
	var current atomic.Pointer[progress]
	current.Store(&progress{while: "parsing"})
	step := func(while string, where *whereTracer) { current.Store(&progress{while, where}) }
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		func() {
			// A panic here would end the process and the set in force with it.
			defer func() {
				if p := recover(); p != nil {
					r.err = fmt.Errorf("load policies: OPA panicked: %v", p)
				}
			}()
			r.v, r.err = load(ctx, step)
		}()
		stopGuard()
		<-loadSlot
		done <- r
	}()
	var r result
	select {
	case r = <-done:
		if r.err == nil {
			return r.v, nil // finished: a limit reached after its last step stopped nothing
		}
	case <-ctx.Done():
		// The load may be inside a compiler stage that cannot be interrupted: do not wait for it.
		r.err = context.Cause(ctx)
	}
	if cause := context.Cause(ctx); cause == deadline || cause == budget {
		p := current.Load()
		le := &LimitError{Limit: cause.Error(), While: p.while}
		if p.where != nil {
			le.At = p.where.last.Load()
		}
		return zero, le
	}
	return zero, r.err
}

// errStopped is what the compiler reports when a limit stopped it between two stages; bounded
// replaces it with the *LimitError.
var errStopped = errors.New("policy set load stopped")

// stopBetweenStages makes compiler check ctx after each of its stages, so that a compile that
// outlives its load stops at the next stage instead of running on.
func stopBetweenStages(ctx context.Context, compiler *ast.Compiler) {
	check := ast.CompilerStageDefinition{
		Name: "DaemonguardLoadLimits", MetricName: "daemonguard_load_limits",
		Stage: func(*ast.Compiler) *ast.Error {
			if ctx.Err() != nil {
				return ast.NewError(ast.CompileErr, nil, "%v", errStopped)
			}
			return nil
		},
	}
	for _, stage := range compiler.StagesToRun() {
		compiler.WithStageAfterID(stage, check)
	}
}
