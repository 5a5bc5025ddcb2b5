package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/daemonguard/daemonguard/internal/admission"
)

// blocking is a Lookups whose namespace read, which every DaemonSet review makes before its
// policies run, blocks until the review's context ends: an evaluation that would run for ever.
// Each read sends its context on entered when it begins.
func blocking(entered chan<- context.Context) admission.Lookups {
	return admission.Lookups{NamespaceLabels: func(ctx context.Context, _ string) (map[string]string, error) {
		entered <- ctx
		<-ctx.Done()
		return nil, context.Cause(ctx)
	}}
}

// blockingHandlers are the built-in policies behind a blocking namespace read.
func blockingHandlers(t *testing.T, mode admission.FailureMode, b Bounds) (*Handlers, chan context.Context) {
	t.Helper()
	entered := make(chan context.Context, 16)
	h := &Handlers{Engine: testHandlers(t).Engine, FailureMode: mode, Lookups: blocking(entered), Bounds: b, Log: logr.Discard()}
	return h, entered
}

// received waits for the next blocked evaluation's context.
func received(t *testing.T, entered <-chan context.Context) context.Context {
	t.Helper()
	return within(t, entered, "no evaluation began")
}

// within is the next value on ch, failing the test with "<what> within 10s" when none comes.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal(what + " within 10s")
		var zero T
		return zero
	}
}

// message is a response's denial message, or its warnings.
func message(resp *admissionv1.AdmissionResponse) string {
	msg := strings.Join(resp.Warnings, "; ")
	if resp.Result != nil {
		msg = resp.Result.Message + msg
	}
	return msg
}

var validateBody = []byte(review("apps", "v1", "DaemonSet", "CREATE", seedObject))

// The server's deadline bounds every evaluation: a caller that asks for longer gets the server's,
// one that asks for less gets what it asked for.
func TestTheServerDeadlineCapsEveryEvaluation(t *testing.T) {
	tests := map[string]struct {
		query    string // the review's query
		server   time.Duration
		wantInIt string // the deadline the denial names
	}{
		"a caller asking for 30s gets the server's":          {query: "?timeout=30s", server: 50 * time.Millisecond, wantInIt: "deadline of 50ms"},
		"a caller asking for nothing gets the server's":      {query: "", server: 50 * time.Millisecond, wantInIt: "deadline of 50ms"},
		"a caller asking for less than the server's gets it": {query: "?timeout=20ms", server: time.Minute, wantInIt: "deadline of 20ms"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, _ := blockingHandlers(t, admission.FailClosed, Bounds{Timeout: tc.server})
			req := httptest.NewRequest(http.MethodPost, ValidateDaemonSetPath+tc.query, strings.NewReader(string(validateBody)))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			start := time.Now()
			h.Endpoints()[ValidateDaemonSetPath].ServeHTTP(rec, req)
			took := time.Since(start)
			code, resp := decoded(t, rec)
			if code != http.StatusOK || resp.Allowed || !strings.Contains(message(resp), tc.wantInIt) {
				t.Errorf("HTTP %d, allowed=%v %q, want a denial naming %q", code, resp.Allowed, message(resp), tc.wantInIt)
			}
			if took > 10*time.Second {
				t.Errorf("answered after %s", took)
			}
		})
	}
}

// decoded is a recorded answer's status and review response.
func decoded(t *testing.T, rec *httptest.ResponseRecorder) (int, *admissionv1.AdmissionResponse) {
	t.Helper()
	code, resp := rec.Code, (*admissionv1.AdmissionResponse)(nil)
	var ar admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &ar); err != nil || ar.Response == nil {
		t.Fatalf("HTTP %d, undecodable review %q: %v", code, rec.Body.String(), err)
	}
	resp = ar.Response
	return code, resp
}

// An evaluation stops when its client hangs up, over a real connection: net/http ends the
// request's context, and the replica is not stopping.
func TestAnEvaluationStopsWhenItsClientHangsUp(t *testing.T) {
	h, entered := blockingHandlers(t, admission.FailClosed, Bounds{Timeout: time.Minute})
	srv := httptest.NewServer(h.Endpoints()[ValidateDaemonSetPath])
	defer srv.Close()
	ctx, hangUp := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"?timeout=30s", strings.NewReader(string(validateBody)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	sent := make(chan error, 1)
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	evaluation := received(t, entered)
	errorsBefore := testutil.ToFloat64(evaluationErrors)
	hangUp()
	select {
	case <-evaluation.Done():
		if cause := context.Cause(evaluation); !errors.Is(cause, errClientGone) {
			t.Errorf("the evaluation ended with %v, want %v", cause, errClientGone)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the evaluation still runs 10s after its client hung up")
	}
	<-sent
	// The handler has answered once the server closes; a hang-up is no evaluation error.
	srv.Close()
	if got := testutil.ToFloat64(evaluationErrors); got != errorsBefore {
		t.Errorf("daemonguard_policy_evaluation_errors_total grew by %v for a client that hung up, want 0", got-errorsBefore)
	}
}

// Reviews beyond the limit of concurrent evaluations get the failure mode's answer at once,
// counted by reason; pods, which no policy evaluates, are not limited.
func TestReviewsBeyondTheConcurrencyLimitGetTheFailureMode(t *testing.T) {
	tests := map[string]struct {
		mode        admission.FailureMode
		wantAllowed bool
	}{
		"failure mode deny denies, naming the limit":        {mode: admission.FailClosed},
		"failure mode warn admits, warning about the limit": {mode: admission.FailOpenWithWarning, wantAllowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// No review waits: the third is answered at once.
			h, entered := blockingHandlers(t, tc.mode, Bounds{Timeout: time.Minute, MaxConcurrent: 2, MaxWaiting: -1})
			eps := h.Endpoints()
			ctx, cancel := context.WithCancel(context.Background())
			finished := make(chan struct{}, 2)
			for _, path := range []string{ValidateDaemonSetPath, MutateDaemonSetPath} {
				go func() {
					req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(validateBody))).WithContext(ctx)
					req.Header.Set("Content-Type", "application/json")
					eps[path].ServeHTTP(httptest.NewRecorder(), req)
					finished <- struct{}{}
				}()
			}
			received(t, entered)
			received(t, entered)
			before := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedConcurrency))
			start := time.Now()
			code, resp := serve(eps[ValidateDaemonSetPath], validateBody)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("the third review was answered after %s, want at once", took)
			}
			if code != http.StatusOK || resp == nil || resp.Allowed != tc.wantAllowed || !strings.Contains(message(resp), "--max-concurrent-evaluations") {
				t.Errorf("HTTP %d, response %+v, want allowed=%v naming the limit", code, resp, tc.wantAllowed)
			}
			if got := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedConcurrency)); got != before+1 {
				t.Errorf("rejected{concurrency} = %v, want %v", got, before+1)
			}
			if code, resp := serve(eps[MutatePodPath], []byte(review("", "v1", "Pod", "CREATE", podObject))); code != http.StatusOK || resp == nil || !resp.Allowed {
				t.Errorf("a pod pinned while the limit is reached: HTTP %d, %+v", code, resp)
			}
			cancel() // the clients hang up: the two blocked evaluations end
			<-finished
			<-finished
			h.Lookups = testHandlers(t).Lookups // no longer blocking
			if code, resp := serve(eps[ValidateDaemonSetPath], validateBody); code != http.StatusOK || resp == nil || !resp.Allowed || len(resp.Warnings) > 0 {
				t.Errorf("a review after the others ended: HTTP %d, %+v", code, resp)
			}
		})
	}
}

// A review beyond the concurrency limit waits for an evaluation to end: it is evaluated when one
// does; it is answered by the failure mode, naming the bound, when the queue is full, when no
// evaluation ended within a quarter of the deadline, or when the heap passes its limit while it
// waits. Each refusal is counted.
func TestReviewsWaitBrieflyForAnEvaluationToEnd(t *testing.T) {
	// start serves a validation whose client hangs up when stop is called; its answer arrives
	// on the returned channel.
	start := func(h http.Handler) (stop func(), answered <-chan *admissionv1.AdmissionResponse) {
		ctx, cancel := context.WithCancel(context.Background())
		ch := make(chan *admissionv1.AdmissionResponse, 1)
		go func() {
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(validateBody))).WithContext(ctx)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			var ar admissionv1.AdmissionReview
			_ = json.Unmarshal(rec.Body.Bytes(), &ar)
			ch <- ar.Response
		}()
		return cancel, ch
	}
	// answer is the answer that arrives on ch within 10s.
	answer := func(t *testing.T, ch <-chan *admissionv1.AdmissionResponse) *admissionv1.AdmissionResponse {
		t.Helper()
		return within(t, ch, "no answer")
	}
	refused := func(t *testing.T, resp *admissionv1.AdmissionResponse, want string) {
		t.Helper()
		if resp == nil || resp.Allowed || !strings.Contains(message(resp), want) {
			t.Errorf("answered %+v, want a denial containing %q", resp, want)
		}
	}

	// busy is a gate whose one slot an evaluation holds, blocked until its client hangs up
	// (stop, or the test's end) or its deadline passes.
	type busy struct {
		g       *gate
		eps     map[string]http.Handler
		entered chan context.Context
		stop    func()
		first   <-chan *admissionv1.AdmissionResponse // the blocked evaluation's answer
	}
	// oneEvaluating is busy under bounds b (MaxConcurrent 1); tune sets the gate's test seams.
	oneEvaluating := func(t *testing.T, b Bounds, tune func(*gate)) busy {
		t.Helper()
		b.MaxConcurrent = 1
		h, entered := blockingHandlers(t, admission.FailClosed, b)
		g := newGate(h.Bounds, h.Log)
		if tune != nil {
			tune(g)
		}
		eps := h.endpoints(g)
		stop, first := start(eps[ValidateDaemonSetPath])
		t.Cleanup(stop)
		received(t, entered)
		return busy{g: g, eps: eps, entered: entered, stop: stop, first: first}
	}

	t.Run("a waiting review is evaluated when an evaluation ends", func(t *testing.T) {
		b := oneEvaluating(t, Bounds{Timeout: time.Minute, MaxWaiting: 1}, nil)
		stopSecond, _ := start(b.eps[MutateDaemonSetPath])
		defer stopSecond()
		waiting(t, b.g, 1)
		b.stop()
		answer(t, b.first)
		received(t, b.entered) // the second one's evaluation began
		waiting(t, b.g, 0)
	})

	t.Run("a review beyond the queue is refused at once, naming the queue's bound", func(t *testing.T) {
		b := oneEvaluating(t, Bounds{Timeout: time.Minute, MaxWaiting: 1}, nil)
		stopSecond, _ := start(b.eps[ValidateDaemonSetPath])
		defer stopSecond()
		waiting(t, b.g, 1)
		before := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedConcurrency))
		_, resp := serve(b.eps[ValidateDaemonSetPath], validateBody)
		refused(t, resp, "--max-waiting-evaluations")
		if got := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedConcurrency)); got != before+1 {
			t.Errorf("rejected{concurrency} = %v, want %v", got, before+1)
		}
	})

	t.Run("a review that waited a quarter of the deadline is refused, naming the wait", func(t *testing.T) {
		// The evaluation ahead blocks until the deadline, 400ms; the review behind it waits 100ms.
		b := oneEvaluating(t, Bounds{Timeout: 400 * time.Millisecond, MaxWaiting: 1}, nil)
		began := time.Now()
		_, resp := serve(b.eps[ValidateDaemonSetPath], validateBody)
		refused(t, resp, "none of them ended within 100ms")
		if took := time.Since(began); took < 100*time.Millisecond {
			t.Errorf("refused after %s, before its wait of 100ms", took)
		}
		refused(t, answer(t, b.first), "deadline")
		waiting(t, b.g, 0)
	})

	t.Run("waiting reviews are refused when the heap passes its limit", func(t *testing.T) {
		var heap atomic.Uint64
		heap.Store(10 << 20)
		b := oneEvaluating(t, Bounds{Timeout: time.Minute, MaxWaiting: 2, HeapLimit: 100 << 20}, func(g *gate) {
			g.heap, g.collect = heap.Load, func() {}
		})
		stopSecond, second := start(b.eps[ValidateDaemonSetPath])
		defer stopSecond()
		waiting(t, b.g, 1)
		heap.Store(200 << 20)
		refused(t, answer(t, b.first), "--evaluation-heap-limit")
		refused(t, answer(t, second), "--evaluation-heap-limit")
		waiting(t, b.g, 0)
	})
}

// waiting waits until n reviews wait at g.
func waiting(t *testing.T, g *gate, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g.mu.Lock()
		got := len(g.waiting)
		g.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d reviews wait, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// Waiting reviews are admitted in the order they came, each when an evaluation ends.
func TestWaitingReviewsAreAdmittedFirstComeFirst(t *testing.T) {
	g := newGate(Bounds{Timeout: time.Minute, MaxConcurrent: 1, MaxWaiting: 2}, logr.Discard())
	_, doneFirst, err := g.enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	type admitted struct {
		name string
		done func()
	}
	order := make(chan admitted, 2)
	for _, name := range []string{"second", "third"} {
		go func() {
			_, done, err := g.enter(context.Background())
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			order <- admitted{name, done}
		}()
		// The next one starts after this one waits, so the order they came is known.
		waiting(t, g, map[string]int{"second": 1, "third": 2}[name])
	}
	// admittedNext is the next review admitted.
	admittedNext := func() admitted {
		t.Helper()
		return within(t, order, "no waiting review was admitted after an evaluation's end")
	}
	doneFirst()
	next := admittedNext()
	if next.name != "second" {
		t.Fatalf("%s admitted first, want second", next.name)
	}
	g.mu.Lock()
	running, waitingNow := g.running, len(g.waiting)
	g.mu.Unlock()
	if running != 1 || waitingNow != 1 {
		t.Errorf("after the hand-over: %d running, %d waiting; want 1 and 1", running, waitingNow)
	}
	next.done()
	if last := admittedNext(); last.name != "third" {
		t.Fatalf("%s admitted last, want third", last.name)
	} else {
		last.done()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running != 0 || len(g.waiting) != 0 {
		t.Errorf("at the end: %d running, %d waiting; want none", g.running, len(g.waiting))
	}
}

// When the heap passes its limit, the evaluations in flight are cancelled and answered by the
// failure mode, new ones are refused at once, both counted; back under the limit, reviews are
// evaluated again. The heap reading is the gate's test seam.
func TestTheHeapWatchdogCancelsAndRefusesEvaluations(t *testing.T) {
	h, entered := blockingHandlers(t, admission.FailClosed, Bounds{Timeout: time.Minute, HeapLimit: 100 << 20})
	g := newGate(h.Bounds, h.Log)
	var heap, collections atomic.Uint64
	heap.Store(10 << 20)
	g.heap, g.collect = heap.Load, func() { collections.Add(1) }
	eps := h.endpoints(g)
	before := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedMemory))

	answered := make(chan *admissionv1.AdmissionResponse, 1)
	go func() {
		_, resp := serve(eps[ValidateDaemonSetPath], validateBody)
		answered <- resp
	}()
	received(t, entered)
	heap.Store(200 << 20)
	select {
	case resp := <-answered:
		if resp == nil || resp.Allowed || !strings.Contains(message(resp), "--evaluation-heap-limit") {
			t.Errorf("the evaluation in flight was answered %+v, want a denial naming the heap limit", resp)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the evaluation in flight still runs 10s after the heap passed its limit")
	}
	if _, resp := serve(eps[MutateDaemonSetPath], validateBody); resp == nil || resp.Allowed || !strings.Contains(message(resp), "--evaluation-heap-limit") {
		t.Errorf("a review while the heap is over its limit was answered %+v, want a denial naming the heap limit", resp)
	}
	if got := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedMemory)); got != before+2 {
		t.Errorf("rejected{memory} = %v, want %v (one cancelled, one refused)", got, before+2)
	}
	deadline := time.Now().Add(10 * time.Second)
	for collections.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if collections.Load() == 0 {
		t.Error("no garbage collection while the heap was over its limit and nothing evaluated")
	}

	heap.Store(10 << 20)
	for {
		g.mu.Lock()
		tripped := g.tripped
		g.mu.Unlock()
		if !tripped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still refusing 10s after the heap went back under its limit")
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.Lookups = testHandlers(t).Lookups
	if _, resp := serve(eps[ValidateDaemonSetPath], validateBody); resp == nil || !resp.Allowed || len(resp.Warnings) > 0 {
		t.Errorf("a review after the heap went back under its limit was answered %+v", resp)
	}
}

// Nothing a caller sends is echoed back at length: a review whose kind is 6 MiB, which every
// endpoint refuses naming the kind, gets an answer of at most admission.MaxAnswerMessage and a little.
func TestAnAnswerDoesNotGrowWithTheRequest(t *testing.T) {
	body := []byte(review("apps", "v1", strings.Repeat("K", 6<<20), "CREATE", seedObject))
	for path, ep := range testHandlers(t).Endpoints() {
		code, resp := serve(ep, body)
		if code != http.StatusOK || resp == nil || resp.Result == nil || !strings.Contains(resp.Result.Message, "more bytes)") {
			t.Fatalf("%s: HTTP %d, %.300v, want a refusal whose message is cut", path, code, resp)
		}
		if n := len(resp.Result.Message); n > admission.MaxAnswerMessage+64 {
			t.Errorf("%s: a %d-byte message, want at most %d and a little", path, n, admission.MaxAnswerMessage)
		}
	}
}

// A flood of reviews naming namespaces that exist nowhere, which only a client on the pod
// network sends (the API server's NamespaceLifecycle refuses such writes before any webhook):
// the cache misses every one, and each is read again from the API server, but only inside the
// bound on evaluations at once. The API server sees at most MaxConcurrent reads at a time and
// MaxConcurrent+MaxWaiting in all; every other review is answered by the failure mode at once.
func TestNamespacesTheCacheMissesAreReadLiveWithinTheBound(t *testing.T) {
	const flood, limit, waiting = 64, 4, 4
	// The API server behind the cache: each read counts, says so on entered, and waits until
	// release is closed or its review ends; neither holds the namespaces.
	var calls, in, most atomic.Int64
	entered, release := make(chan struct{}, flood), make(chan struct{})
	live := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			calls.Add(1)
			n := in.Add(1)
			defer in.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			return c.Get(ctx, key, obj, opts...)
		},
	}).Build()
	lookups := admission.ReaderLookups(fake.NewClientBuilder().Build(), live)
	builtin := testHandlers(t).Lookups
	lookups.Nodes, lookups.PriorityClass = builtin.Nodes, builtin.PriorityClass
	h := &Handlers{Engine: testHandlers(t).Engine, FailureMode: admission.FailClosed, Lookups: lookups,
		Bounds: Bounds{Timeout: time.Minute, MaxConcurrent: limit, MaxWaiting: waiting}, Log: logr.Discard()}
	validate := h.Endpoints()[ValidateDaemonSetPath]
	before := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedConcurrency))
	answers := make(chan *admissionv1.AdmissionResponse, flood)
	for i := range flood {
		body := strings.Replace(string(validateBody), `"namespace":"default"`, fmt.Sprintf(`"namespace":"ghost-%d"`, i), 1)
		go func() {
			_, resp := serve(validate, []byte(body))
			answers <- resp
		}()
	}
	// Those beyond the evaluations and the queue are answered while the reads hang.
	for range flood - limit - waiting {
		if resp := within(t, answers, "a review beyond the bound answered"); resp == nil || resp.Allowed || !strings.Contains(message(resp), "--max-concurrent-evaluations") {
			t.Fatalf("a review beyond the bound: %+v, want denied naming the limit", resp)
		}
	}
	if got := testutil.ToFloat64(rejectedTotal.WithLabelValues(rejectedConcurrency)); got != before+flood-limit-waiting {
		t.Errorf("rejected{concurrency} = %v, want %v", got, before+flood-limit-waiting)
	}
	for range limit {
		within(t, entered, "a namespace read at the API server")
	}
	if got := in.Load(); got != limit {
		t.Errorf("%d namespace reads in flight at the API server, want %d", got, limit)
	}
	close(release)
	for range limit + waiting {
		if resp := within(t, answers, "an evaluated review answered"); resp == nil {
			t.Fatal("an evaluated review got no AdmissionResponse")
		}
	}
	if n, m := calls.Load(), most.Load(); m > limit || n > limit+waiting {
		t.Errorf("the API server saw %d namespace reads, at most %d at once; want at most %d, %d at once", n, m, limit+waiting, limit)
	}
}
