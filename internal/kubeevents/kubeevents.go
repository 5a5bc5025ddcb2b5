// Package kubeevents sends a component's Kubernetes Events to the API server and stops in order.
//
// client-go's broadcaster writes each Event on its own goroutine with the context it was started
// with: a component that cancels that context as it stops aborts the writes under way, and
// client-go reports each one ("Unable to write event ... context canceled") through klog, on the
// process's stderr. Here the component stops the broadcaster itself, after its last Event: the
// writes under way finish, each bounded by writeTimeout, and whatever client-go has to say about
// writing Events goes to the component's logger.
//
// Events wait for their turn (writesPerSecond) before their write begins, not inside it: a burst
// of Events, such as an audit's first pass over thousands of DaemonSets, would otherwise spend
// writeTimeout waiting on the client's rate limiter, and client-go gives an Event up after
// twelve such timeouts.
package kubeevents

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
)

// writeTimeout bounds one write of an Event, so stopping never waits on an API server that is gone.
const writeTimeout = 10 * time.Second

// An Event is a low-priority write: at most writesPerSecond, in bursts of writeBurst, reach the
// API server from one process. 2,000 Events take about 100 s.
const (
	writesPerSecond = 20
	writeBurst      = 50
)

// Broadcaster sends the Events of its recorders to the API server until Stop.
type Broadcaster struct {
	broadcaster events.EventBroadcaster
	sink        *trackedSink
	cancel      context.CancelFunc
	log         logr.Logger
}

// Start starts sending Events (events.k8s.io/v1) to the API server of cfg, paced by this package
// rather than by cfg's QPS; log receives client-go's messages about writing them.
func Start(cfg *rest.Config, log logr.Logger) (*Broadcaster, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.RateLimiter = -1, nil // the sink waits for each write's turn itself
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("create the Events client: %w", err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), log))
	sink := newTrackedSink(&events.EventSinkImpl{Interface: client.EventsV1()}, flowcontrol.NewTokenBucketRateLimiter(writesPerSecond, writeBurst))
	b := &Broadcaster{broadcaster: events.NewBroadcaster(sink), sink: sink, cancel: cancel, log: log}
	if err := b.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		cancel()
		return nil, fmt.Errorf("start recording events: %w", err)
	}
	return b, nil
}

// NewRecorder returns a recorder whose Events name reportingController as their source.
func (b *Broadcaster) NewRecorder(reportingController string) events.EventRecorderLogger {
	return b.broadcaster.NewRecorder(scheme.Scheme, reportingController).WithLogger(b.log)
}

// Stop ends the broadcaster once its recorders are no longer used: the writes under way finish,
// then retries, series updates and Events still waiting for their turn end. Delivery stays best
// effort, as with client-go's own broadcaster: an Event that has not reached the API server when
// Stop is called is dropped.
func (b *Broadcaster) Stop() {
	b.broadcaster.Shutdown()
	b.sink.wait()
	b.cancel()
}

// trackedSink writes Events independently of the broadcaster's context, each within
// writeTimeout once its turn has come, and counts the writes under way.
type trackedSink struct {
	sink     events.EventSink
	turns    flowcontrol.RateLimiter
	mu       sync.Mutex
	idle     *sync.Cond
	inFlight int
}

func newTrackedSink(sink events.EventSink, turns flowcontrol.RateLimiter) *trackedSink {
	s := &trackedSink{sink: sink, turns: turns}
	s.idle = sync.NewCond(&s.mu)
	return s
}

// begin waits for a write's turn (until ctx, the broadcaster's, ends), counts the write and
// returns its context and the function that ends it.
func (s *trackedSink) begin(ctx context.Context) (context.Context, func(), error) {
	if err := s.turns.Wait(ctx); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	s.inFlight++
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	return ctx, func() {
		cancel()
		s.mu.Lock()
		s.inFlight--
		if s.inFlight == 0 {
			s.idle.Broadcast()
		}
		s.mu.Unlock()
	}, nil
}

// wait returns when no write is under way.
func (s *trackedSink) wait() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.inFlight > 0 {
		s.idle.Wait()
	}
}

// write makes one write once its turn has come, counted and bounded by writeTimeout.
func (s *trackedSink) write(ctx context.Context, do func(context.Context) (*eventsv1.Event, error)) (*eventsv1.Event, error) {
	ctx, end, err := s.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	return do(ctx)
}

func (s *trackedSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, func(ctx context.Context) (*eventsv1.Event, error) { return s.sink.Create(ctx, e) })
}

func (s *trackedSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	return s.write(ctx, func(ctx context.Context) (*eventsv1.Event, error) { return s.sink.Update(ctx, e) })
}

func (s *trackedSink) Patch(ctx context.Context, e *eventsv1.Event, data []byte) (*eventsv1.Event, error) {
	return s.write(ctx, func(ctx context.Context) (*eventsv1.Event, error) { return s.sink.Patch(ctx, e, data) })
}
