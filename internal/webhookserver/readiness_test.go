package webhookserver

import (
	"errors"
	"net/http"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/healthz"
)

// fakeReadyz is the one method addReadinessChecks needs of a manager.
type fakeReadyz map[string]healthz.Checker

func (f fakeReadyz) AddReadyzCheck(name string, c healthz.Checker) error { f[name] = c; return nil }

// daemonguard_webhook_ready is 1 exactly when every check /readyz runs passes.
func TestWebhookReadyFollowsTheReadinessChecks(t *testing.T) {
	t.Cleanup(func() { readinessChecks.Store(nil) })
	readinessChecks.Store(nil)
	if got := replicaReady(); got != 0 {
		t.Fatalf("ready %v before any check was added, want 0", got)
	}
	var policiesErr error
	mgr := fakeReadyz{}
	err := addReadinessChecks(mgr, map[string]healthz.Checker{
		"webhook":  healthz.Ping,
		"policies": func(*http.Request) error { return policiesErr },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mgr) != 2 {
		t.Fatalf("/readyz got checks %v, want webhook and policies", mgr)
	}
	if got := replicaReady(); got != 1 {
		t.Errorf("ready %v with every check passing, want 1", got)
	}
	policiesErr = errors.New("the policy ConfigMaps are not loaded yet")
	if got := replicaReady(); got != 0 {
		t.Errorf("ready %v with a failing check, want 0", got)
	}
}
