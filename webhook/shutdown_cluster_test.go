package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/webhook"
)

// A replica that is told to stop goes on answering over the API server's keep-alive connections,
// each answer closing its connection, so the API server sends its next review on a new
// connection (to a replica still in the Service) rather than on one this replica closes under it.
func TestStoppingReplicaAnswersAndClosesEachConnection(t *testing.T) {
	localcluster.NeedCluster(t)
	const delay = 3 * time.Second
	certDir, caBundle, port, err := harness.ServingEndpoint(cluster, "stopping-replica-tls")
	if err != nil {
		t.Fatal(err)
	}
	healthAddr := "127.0.0.1:" + strconv.Itoa(harness.FreePort(t))
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- webhookserver.Run(runCtx, webhookserver.Options{
			RESTConfig: cluster.RESTConfig, Namespace: webhookNamespace,
			Host: "127.0.0.1", Port: port, CertDir: certDir, MetricsAddr: "0", HealthAddr: healthAddr,
			FailureMode: admission.FailClosed, ShutdownDelay: delay, Log: logr.Discard(),
		})
	}()
	t.Cleanup(stop)
	cluster.WaitFor(t, time.Minute, "the replica is ready", func(ctx context.Context) (bool, string) {
		return harness.Ready(ctx, healthAddr)
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	// The API server's way: HTTP/1.1, keep-alive connections.
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}, ForceAttemptHTTP2: false,
	}}
	url := "https://127.0.0.1:" + strconv.Itoa(port) + webhook.ValidateDaemonSetPath + "?timeout=5s"
	type answer struct {
		allowed, reused, closes bool
	}
	send := func() answer {
		t.Helper()
		var a answer
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { a.reused = info.Reused },
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(daemonSetCreateReview))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("review: %v", err)
		}
		defer resp.Body.Close()
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&review); err != nil || review.Response == nil {
			t.Fatalf("HTTP %d, undecodable review: %v", resp.StatusCode, err)
		}
		a.allowed, a.closes = review.Response.Allowed, resp.Close
		return a
	}

	if a := send(); !a.allowed || a.closes {
		t.Fatalf("a serving replica answered %+v, want allowed on a connection kept open", a)
	}
	stop()
	cluster.WaitFor(t, delay, "the stopping replica reports not ready", func(ctx context.Context) (bool, string) {
		ready, status := harness.Ready(ctx, healthAddr)
		return !ready, status
	})
	if a := send(); !a.allowed || !a.reused || !a.closes {
		t.Errorf("the stopping replica answered %+v, want allowed on the kept connection, closing it", a)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the replica stopped with %v", err)
		}
	case <-time.After(delay + time.Minute):
		t.Fatalf("the replica still runs %s after it was told to stop", delay+time.Minute)
	}
}

const daemonSetCreateReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1",` +
	`"kind":{"group":"apps","version":"v1","kind":"DaemonSet"},"resource":{"group":"apps","version":"v1","resource":"daemonsets"},` +
	`"namespace":"default","operation":"CREATE","object":{"apiVersion":"apps/v1","kind":"DaemonSet",` +
	`"metadata":{"name":"stopping-replica","namespace":"default"},"spec":{"selector":{"matchLabels":{"app":"a"}},` +
	`"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}},` +
	`"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"a","image":"registry.example/agent:1.0"}]}}}}}}`
