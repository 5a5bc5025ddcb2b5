package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/leadership"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/webhook"
)

// logLines records a replica's log lines, to tell when its audit runs and when it holds the lease.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

// count returns how many lines so far contain msg, and the index after the last line read.
func (l *logLines) count(msg string, from int) (n, end int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines[min(from, len(l.lines)):] {
		if strings.Contains(line, `"msg"="`+msg+`"`) {
			n++
		}
	}
	return n, len(l.lines)
}

// A replica that cannot renew the audit's lease stops auditing and keeps serving admission: past
// the renew deadline (when controller-runtime's leader election used to end the process) it
// still answers reviews, and once the lease can be had again it takes it and audits again.
func TestReplicaThatLosesTheAuditLeaseKeepsAdmitting(t *testing.T) {
	localcluster.NeedCluster(t)
	ctx := context.Background()
	// controller-runtime's timing, an eighth of leadership's: what is tested is what happens past
	// the renew deadline, whatever its length.
	timing := leadership.Timing{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	// A namespace of its own: its own audit Lease, apart from the package's shared webhook.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lease-loss"}}
	if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	certDir, caBundle, port, err := harness.ServingEndpoint(cluster, "lease-loss-tls")
	if err != nil {
		t.Fatal(err)
	}
	healthPort := harness.FreePort(t)
	logs := &logLines{}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- webhookserver.Run(runCtx, webhookserver.Options{
			RESTConfig: cluster.RESTConfig, Namespace: ns.Name,
			Host: "127.0.0.1", Port: port, CertDir: certDir, MetricsAddr: "0", HealthAddr: "127.0.0.1:" + strconv.Itoa(healthPort),
			FailureMode: admission.FailClosed, LeaderElection: true, AuditInterval: 2 * time.Second, AuditLeaseTiming: timing,
			Log: funcr.New(logs.add, funcr.Options{}),
		})
	}()
	stopped := false
	t.Cleanup(func() {
		if stopped {
			return
		}
		stop()
		if err := <-done; err != nil {
			t.Errorf("replica: %v", err)
		}
	})
	cluster.WaitFor(t, time.Minute, "the replica is ready", func(ctx context.Context) (bool, string) {
		return harness.Ready(ctx, "127.0.0.1:"+strconv.Itoa(healthPort))
	})
	cluster.WaitFor(t, time.Minute, "the replica holds the lease and audits", func(context.Context) (bool, string) {
		n, _ := logs.count("Audit finished", 0)
		return n > 0, fmt.Sprintf("%d audits", n)
	})

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	// admits sends the replica a review of a DaemonSet create and checks that it is answered with
	// a verdict (allowed or denied by policy), not an error.
	reviews := 0
	admits := func() error {
		reviews++
		uid := "lease-" + strconv.Itoa(reviews)
		ds := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"agent","namespace":"default"},` +
			`"spec":{"selector":{"matchLabels":{"app":"agent"}},"template":{"metadata":{"labels":{"app":"agent"}},"spec":{"containers":[{"name":"a","image":"agent:1"}]}}}}`
		body := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"` + uid + `",` +
			`"kind":{"group":"apps","version":"v1","kind":"DaemonSet"},"resource":{"group":"apps","version":"v1","resource":"daemonsets"},` +
			`"namespace":"default","name":"agent","operation":"CREATE","userInfo":{},"object":` + ds + `}}`
		resp, err := client.Post(fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.ValidateDaemonSetPath), "application/json", bytes.NewBufferString(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(resp.Body).Decode(&review); err != nil {
			return fmt.Errorf("HTTP %d, not a review: %w", resp.StatusCode, err)
		}
		r := review.Response
		if r == nil || string(r.UID) != uid || (!r.Allowed && (r.Result == nil || r.Result.Code != http.StatusForbidden)) {
			return fmt.Errorf("HTTP %d, review answered %+v", resp.StatusCode, r)
		}
		return nil
	}
	if err := admits(); err != nil {
		t.Fatalf("before the lease is taken: %v", err)
	}

	// Take the lease away: another holder, renewed now, for an hour. The replica cannot renew it.
	leases := cluster.Client.CoordinationV1().Leases(ns.Name)
	lease, err := leases.Get(ctx, "daemonguard-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To("intruder"), LeaseDurationSeconds: ptr.To[int32](3600), AcquireTime: &now, RenewTime: &now}
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	taken := time.Now()

	// Until the replica gives the lease up, and for a renew deadline after that (twice the time
	// after which the manager's leader election used to end the process), every review is
	// answered and the replica runs; once the lease is lost, no audit runs.
	var lostAt time.Time
	var lostLine int
	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	for deadline := taken.Add(2*timing.RenewDeadline + 2*timing.RetryPeriod); time.Now().Before(deadline); {
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("the replica ended %s after its lease was taken: %v", time.Since(taken).Round(time.Second), err)
		case <-ticker.C:
		}
		if err := admits(); err != nil {
			t.Fatalf("%s after the lease was taken: %v", time.Since(taken).Round(time.Second), err)
		}
		if lostAt.IsZero() {
			if n, end := logs.count("Lost the lease; campaigning again", 0); n > 0 {
				lostAt, lostLine = time.Now(), end
				t.Logf("the replica gave up the lease %s after it was taken", lostAt.Sub(taken).Round(time.Second))
			}
			continue
		}
		if n, _ := logs.count("Audit finished", lostLine); n > 0 {
			t.Fatalf("the replica audited %d times without the lease", n)
		}
		if time.Since(lostAt) > timing.RenewDeadline {
			break
		}
	}
	if lostAt.IsZero() {
		t.Fatalf("the replica did not give the lease up within %s", 2*timing.RenewDeadline+2*timing.RetryPeriod)
	}
	t.Logf("the replica answered %d reviews in the %s after its lease was taken", reviews, time.Since(taken).Round(time.Second))

	// The lease goes away: the replica campaigns, takes it and audits again.
	if err := leases.Delete(ctx, "daemonguard-webhook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, from := logs.count("", 0)
	cluster.WaitFor(t, 2*timing.RetryPeriod+30*time.Second, "the replica takes the lease again and audits", func(ctx context.Context) (bool, string) {
		l, err := leases.Get(ctx, "daemonguard-webhook", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "intruder" {
			return false, fmt.Sprintf("lease %v, %v", l.Spec.HolderIdentity, err)
		}
		n, _ := logs.count("Audit finished", from)
		return n > 0, fmt.Sprintf("held by %s, %d audits since", *l.Spec.HolderIdentity, n)
	})
	if err := admits(); err != nil {
		t.Fatalf("after the lease came back: %v", err)
	}
}
