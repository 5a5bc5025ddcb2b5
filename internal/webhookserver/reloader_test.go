package webhookserver

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/webhook"
)

// zeroBudgetReview is a DaemonSet CREATE the built-in rolling_update_budget denies.
const zeroBudgetReview = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u1",
"kind":{"group":"apps","version":"v1","kind":"DaemonSet"},"resource":{"group":"apps","version":"v1","resource":"daemonsets"},
"namespace":"team-a","name":"frozen","operation":"CREATE","object":{"apiVersion":"apps/v1","kind":"DaemonSet",
"metadata":{"name":"frozen","namespace":"team-a"},"spec":{"selector":{"matchLabels":{"app":"a"}},
"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":0,"maxSurge":0}},
"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"a","image":"a:1"}]}}}}}}`

// newServingReloader is a reloader whose engine serves the built-in set, with one policy
// ConfigMap ("team", a module configmap/team/no_latest.rego) not read yet.
func newServingReloader(t *testing.T) *policyReloader {
	t.Helper()
	r := newTestReloader(t)
	initial, err := policy.Compile(context.Background(), r.builtin, r.builtinParams)
	if err != nil {
		t.Fatal(err)
	}
	team := policyConfigMap("team", withFile("no_latest.rego", goodRego))
	r.client = fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&team).Build()
	r.namespace, r.log = "daemonguard", logr.Discard()
	r.selector = labels.SelectorFromSet(labels.Set{admission.PolicyConfigMapLabel: "true"})
	r.engine, r.recorder = policy.NewEngine(initial), events.NewFakeRecorder(10)
	return r
}

// While a reload is loading a new set (here held in its load until the test lets it go), the
// validating webhook answers with the set in force: admission reads the engine, never the
// reloader's lock or its load. The new set is in force once the load ends.
func TestAdmissionDoesNotWaitForAReload(t *testing.T) {
	ctx := context.Background()
	r := newServingReloader(t)

	loading, release := make(chan struct{}), make(chan struct{})
	load := r.compileOverlay
	r.compileOverlay = func(ctx context.Context, base []policy.Module, params map[string]any, sources []policy.Source) ([]policy.Module, map[string]any, *policy.Set, error) {
		close(loading)
		<-release
		return load(ctx, base, params, sources)
	}
	reloaded := make(chan error, 1)
	go func() {
		_, err := r.Reconcile(ctx, reconcile.Request{})
		reloaded <- err
	}()
	<-loading

	handlers := &webhook.Handlers{Engine: r.engine, FailureMode: admission.FailClosed, Log: logr.Discard()}
	answered := make(chan *admissionv1.AdmissionResponse, 1)
	go func() {
		req := httptest.NewRequest(http.MethodPost, webhook.ValidateDaemonSetPath, strings.NewReader(zeroBudgetReview))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		handlers.Endpoints()[webhook.ValidateDaemonSetPath].ServeHTTP(rec, req)
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(bytes.NewReader(rec.Body.Bytes())).Decode(&review); err != nil {
			t.Errorf("HTTP %d, undecodable review %q: %v", rec.Code, rec.Body.String(), err)
		}
		answered <- review.Response
	}()
	select {
	case resp := <-answered:
		if resp == nil || resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, "[rolling_update_budget]") {
			t.Errorf("response %+v, want the set in force to deny with [rolling_update_budget]", resp)
		}
	case err := <-reloaded:
		t.Fatalf("the reload ended (%v) while its load was held", err)
	case <-time.After(time.Minute): // a bound for a broken build, not a wait for a condition
		t.Fatal("admission waited for the reload in progress")
	}
	if slices.Contains(r.engine.Set().Modules(), "configmap/team/no_latest.rego") {
		t.Error("the new set is in force before its load ended")
	}

	close(release)
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(r.engine.Set().Modules(), "configmap/team/no_latest.rego") {
		t.Errorf("serving %v after the reload, want the ConfigMap's module", r.engine.Set().Modules())
	}
}

// The audit's first pass runs against the set the ConfigMaps make, not the built-in set the
// engine starts with: a replica may win the audit's lease before its first reload, which waits
// for every informer to sync.
func TestAuditWaitsForThePolicyConfigMaps(t *testing.T) {
	ctx := context.Background()
	r := newServingReloader(t)

	audited := make(chan []string, 1)
	go afterFirstRead(r, func(context.Context) { audited <- r.engine.Set().Modules() })(ctx)
	if err := r.ready(nil); err == nil {
		t.Fatal("ready before the ConfigMaps were read")
	}
	if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	if modules := <-audited; !slices.Contains(modules, "configmap/team/no_latest.rego") {
		t.Errorf("the audit ran against %v, want the set with the ConfigMap's module", modules)
	}
	if err := r.ready(nil); err != nil {
		t.Errorf("not ready after the ConfigMaps were read: %v", err)
	}

	// A stopped replica does not audit while it waits.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	afterFirstRead(newTestReloader(t), func(context.Context) { ran = true })(stopped)
	if ran {
		t.Error("audited after its context ended, before any read")
	}
}
