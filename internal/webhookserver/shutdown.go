package webhookserver

// This file is how a replica stops without failing a write. The API server calls the webhook over
// a pool of HTTP/1.1 keep-alive connections to the Service, and keeps connections to a replica
// that left the Service's endpoints: they were opened before it left. A server that shuts down
// closes its idle connections, and a review the API server is sending on one of them meanwhile
// fails ("write: broken pipe", "EOF"): the API server does not retry a POST, so the write is
// rejected as "failed calling webhook" whatever the failurePolicy allows. HTTP/1.1 has no way to
// tell a client to stop using an idle connection, but an answer can say "Connection: close",
// after which the client opens a new connection, to a replica still in the endpoints. So a
// stopping replica goes on answering for a while, each answer closing its connection, and only
// then shuts down: by then the API server has stopped sending it reviews.

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// errShuttingDown is the readiness check's answer while the replica stops.
var errShuttingDown = errors.New("shutting down: answering with Connection: close until the server stops")

// gracefulStop holds a replica's serving after its context ends.
type gracefulStop struct {
	stopping atomic.Bool
}

// serveFor returns the context the server runs under: it ends delay after ctx does, and from
// ctx's end until then the replica is stopping (closeAfterAnswer, ready). It also ends when
// release is called, which Run defers so that nothing outlives it.
func (g *gracefulStop) serveFor(ctx context.Context, delay time.Duration, log logr.Logger) (serving context.Context, release func()) {
	serving, release = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer release()
		select {
		case <-ctx.Done():
		case <-serving.Done():
			return
		}
		g.stopping.Store(true)
		log.Info("Stopping: every answer closes its connection until the server stops", "delay", delay)
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-serving.Done():
		}
	}()
	return serving, release
}

// closeAfterAnswer makes each answer of a stopping replica close its connection, so the client
// sends its next review on a new connection (to a replica that is not stopping) instead of one
// this replica closes under it when it shuts down.
func (g *gracefulStop) closeAfterAnswer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g.stopping.Load() {
			w.Header().Set("Connection", "close")
		}
		next.ServeHTTP(w, r)
	})
}

// ready fails while the replica stops, so daemonguard_webhook_ready says so too; a terminating
// pod is already out of the Service's ready endpoints.
func (g *gracefulStop) ready(*http.Request) error {
	if g.stopping.Load() {
		return errShuttingDown
	}
	return nil
}
