package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
)

// Every replica serves admission, so every replica must follow the policy ConfigMaps, not only the
// one elected to run the audit, and must not report ready before it has read them: with two
// replicas behind the Service, a replica on the built-in set would admit half the writes a team's
// policy denies.
func TestReplicaThatIsNotLeaderIsReadyWithPolicyConfigMapsLoaded(t *testing.T) {
	startWebhook(t) // the leader: it holds the Lease for as long as the package's tests run
	ctx := context.Background()

	cms := cluster.Client.CoreV1().ConfigMaps(webhookNamespace)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "second-replica", Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}},
		Data: map[string]string{"second_replica.rego": `package daemonguard.policies.second_replica

violation contains {"field": "metadata.name", "msg": "second-replica-probe is not allowed"} if {
	input.object.metadata.name == "second-replica-probe"
}
`},
	}
	if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cms.Delete(context.Background(), cm.Name, metav1.DeleteOptions{}) })
	certDir, caBundle, port, err := harness.ServingEndpoint(cluster, "second-replica-tls")
	if err != nil {
		t.Fatal(err)
	}
	metricsPort, healthPort := harness.FreePort(t), harness.FreePort(t)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- webhookserver.Run(runCtx, webhookserver.Options{
			RESTConfig: cluster.RESTConfig, Namespace: webhookNamespace,
			Host: "127.0.0.1", Port: port, CertDir: certDir,
			MetricsAddr: "127.0.0.1:" + strconv.Itoa(metricsPort), HealthAddr: "127.0.0.1:" + strconv.Itoa(healthPort),
			FailureMode: admission.FailClosed, LeaderElection: true, Log: logr.Discard(),
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("second replica: %v", err)
		}
	})

	// /policy-status answers a scraper allowed to get it, over the webhook's own certificate.
	if err := harness.GrantGet(ctx, cluster.Client, webhookNamespace, "policy-status-reader", harness.MetricsPaths...); err != nil {
		t.Fatal(err)
	}
	token, err := harness.Token(ctx, cluster.Client, webhookNamespace, "policy-status-reader")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	status := func(ctx context.Context) (webhookserver.PolicyStatus, error) {
		var s webhookserver.PolicyStatus
		code, body, err := harness.Scrape(ctx, fmt.Sprintf("https://127.0.0.1:%d%s", metricsPort, webhookserver.PolicyStatusPath), token, &tls.Config{RootCAs: pool})
		if err != nil {
			return s, err
		}
		if code != http.StatusOK {
			return s, fmt.Errorf("HTTP %d: %s", code, body)
		}
		return s, json.Unmarshal(body, &s)
	}
	// Ready means loaded: a replica the Service sends reviews to already enforces the ConfigMaps.
	cluster.WaitFor(t, time.Minute, "the second replica is ready", func(ctx context.Context) (bool, string) {
		return harness.Ready(ctx, "127.0.0.1:"+strconv.Itoa(healthPort))
	})
	module := "configmap/second-replica/second_replica.rego"
	if s, err := status(ctx); err != nil || !slices.Contains(s.Modules, module) {
		t.Errorf("the replica was ready before it loaded %s: modules %v (%v)", module, s.Modules, err)
	}
	leases, err := cluster.Client.CoordinationV1().Leases(webhookNamespace).Get(ctx, "daemonguard-webhook", metav1.GetOptions{})
	if err != nil || leases.Spec.HolderIdentity == nil {
		t.Fatalf("the first replica holds no Lease: %v", err)
	}
}
