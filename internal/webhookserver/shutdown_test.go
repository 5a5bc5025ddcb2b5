package webhookserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

// Until ctx ends the replica serves as usual; from then it is stopping (answers close their
// connections, not ready) until the delay has passed, and only then do its servers stop.
func TestGracefulStopServesForTheDelayAfterTheSignal(t *testing.T) {
	const delay = 200 * time.Millisecond
	var g gracefulStop
	answer := g.closeAfterAnswer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	closes := func() bool {
		rec := httptest.NewRecorder()
		answer.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate", nil))
		return rec.Header().Get("Connection") == "close"
	}
	signal, stop := context.WithCancel(context.Background())
	serving, release := g.serveFor(signal, delay, logr.Discard())
	defer release()

	if closes() || g.ready(nil) != nil || serving.Err() != nil {
		t.Fatalf("before the signal: closes %v, ready %v, serving %v; want a replica that serves", closes(), g.ready(nil), serving.Err())
	}
	stopped := time.Now()
	stop()
	<-serving.Done()
	if took := time.Since(stopped); took < delay {
		t.Errorf("the servers stopped %s after the signal, before the delay of %s", took, delay)
	}
	if !closes() || g.ready(nil) == nil {
		t.Errorf("after the signal: closes %v, ready %v; want every answer closing its connection, not ready", closes(), g.ready(nil))
	}
}

// Run's deferred release ends the serving context, and the goroutine with it, when the manager
// returns on its own (an error) before any signal.
func TestGracefulStopReleaseEndsServingWithoutTheSignal(t *testing.T) {
	var g gracefulStop
	serving, release := g.serveFor(context.Background(), time.Hour, logr.Discard())
	release()
	<-serving.Done()
	if g.ready(nil) != nil {
		t.Errorf("a replica released without a signal reports %v, want ready", g.ready(nil))
	}
}
