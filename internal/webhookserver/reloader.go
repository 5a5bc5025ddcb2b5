package webhookserver

// This file is the policy reloader: the policy set compiled from the built-ins and the labelled
// ConfigMaps, swapped in on every change, and what /policy-status and readiness say about it.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// PolicyStatus is what /policy-status reports about the policy set in force.
type PolicyStatus struct {
	Healthy   bool      `json:"healthy"` // false when the last reload failed and an older set serves
	LastError string    `json:"lastError,omitempty"`
	Modules   []string  `json:"modules"`
	LoadedAt  time.Time `json:"loadedAt"`
	// InProcessInjection is set when a MutatingAdmissionPolicy injects instead of the webhook.
	InProcessInjection *InProcessInjectionStatus `json:"inProcessInjection,omitempty"`
}

var (
	policySetHealthy = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "daemonguard_policy_set_healthy",
		Help: "1 when the last policy reload compiled, 0 when it failed and the last good set still serves.",
	})
	policyReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "daemonguard_policy_reloads_total",
		Help: "Policy set reloads from ConfigMaps, by result (success, failure).",
	}, []string{"result"})
)

// registerMetrics registers the webhook replica's own metrics once, when Run starts: the
// controller runs the same binary, and must not export them.
var registerMetrics = sync.OnceFunc(func() {
	policySetHealthy.Set(1)
	metrics.Registry.MustRegister(policySetHealthy, policyReloads, webhookReady)
})

// policyReloader recompiles the whole policy set whenever a labelled ConfigMap changes. Admission
// never waits for it: handlers read the set in force from the engine (an atomic pointer), and mu
// only keeps reloads apart; a reload is bounded by the load's limits.
type policyReloader struct {
	client        client.Client
	namespace     string
	selector      labels.Selector
	engine        *policy.Engine
	builtin       []policy.Module
	builtinParams map[string]any
	// compileOverlay compiles the ConfigMaps' set over the built-ins within the load's limits
	// (policy.Limits.CompileOverlay); a field so that a test can hold a reload in progress.
	compileOverlay func(ctx context.Context, base []policy.Module, baseParams map[string]any, sources []policy.Source) ([]policy.Module, map[string]any, *policy.Set, error)
	recorder       events.EventRecorder
	log            logr.Logger
	mu             sync.Mutex // one reload at a time
	status         atomicStatus
	readOnce       sync.Once       // closes read
	readInit       sync.Once       // makes read
	read           chan struct{}   // closed once the ConfigMaps have been read: until then only the built-ins serve
	hasGoodSet     bool            // a set compiled from the ConfigMaps has loaded in this process (under mu)
	inProcess      *inProcessCheck // nil when the webhook injects
}

type atomicStatus struct {
	mu sync.RWMutex
	v  PolicyStatus
}

func (a *atomicStatus) Store(s PolicyStatus) { a.mu.Lock(); a.v = s; a.mu.Unlock() }
func (a *atomicStatus) Load() PolicyStatus   { a.mu.RLock(); defer a.mu.RUnlock(); return a.v }

// Reconcile ignores which ConfigMap changed: the set is compiled from all of them together.
func (r *policyReloader) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var list corev1.ConfigMapList
	if err := r.client.List(ctx, &list, client.InNamespace(r.namespace), client.MatchingLabelsSelector{Selector: r.selector}); err != nil {
		return reconcile.Result{}, err
	}
	defer r.readOnce.Do(func() { close(r.readSignal()) })
	modules, params, set, err := r.compile(ctx, list.Items)
	if err != nil {
		policyReloads.WithLabelValues("failure").Inc()
		policySetHealthy.Set(0)
		prev := r.status.Load()
		r.status.Store(PolicyStatus{Healthy: false, LastError: err.Error(), Modules: prev.Modules, LoadedAt: prev.LoadedAt})
		r.log.Error(err, "Policy set rejected; the last good set keeps serving")
		if !r.hasGoodSet {
			r.serveWithoutBlamed(ctx, list.Items, err)
		}
		for i := range list.Items {
			cm := &list.Items[i]
			if blamesConfigMap(err.Error(), cm.Name) {
				r.recorder.Eventf(cm, nil, corev1.EventTypeWarning, "PolicyRejected", "Reload", "policy set rejected, last good set keeps serving: %v", err)
			}
		}
		r.writePolicyErrors(ctx, planPolicyErrors(list.Items, err))
		return reconcile.Result{}, nil // retrying cannot fix the Rego; the next ConfigMap change will
	}
	r.engine.Swap(set)
	r.hasGoodSet = true
	policyReloads.WithLabelValues("success").Inc()
	policySetHealthy.Set(1)
	r.status.Store(PolicyStatus{Healthy: true, Modules: set.Modules(), LoadedAt: time.Now(), InProcessInjection: r.status.Load().InProcessInjection})
	if r.inProcess != nil {
		r.checkInProcess(ctx, modules, params, list.Items)
	}
	r.log.Info("Policy set loaded", "modules", len(set.Modules()), "configMaps", len(list.Items))
	r.writePolicyErrors(ctx, planPolicyErrors(list.Items, nil))
	return reconcile.Result{}, nil
}

// serveWithoutBlamed is what a replica that has never loaded a set from the ConfigMaps (one that
// started after a broken commit) serves instead of the built-ins alone: the set of the ConfigMaps
// the error does not blame, so the teams' valid policies are enforced on this replica as on
// the replicas that keep their last good set. It stays unhealthy: the blamed ConfigMaps are not.
func (r *policyReloader) serveWithoutBlamed(ctx context.Context, cms []corev1.ConfigMap, reloadErr error) {
	var keep []corev1.ConfigMap
	for _, cm := range cms {
		if !blamesConfigMap(reloadErr.Error(), cm.Name) {
			keep = append(keep, cm)
		}
	}
	if len(keep) == 0 {
		return
	}
	_, _, set, err := r.compile(ctx, keep)
	if err != nil {
		r.log.Error(err, "Policy set without the rejected ConfigMaps rejected too; the built-ins keep serving")
		return
	}
	r.engine.Swap(set)
	prev := r.status.Load()
	prev.Modules, prev.LoadedAt = set.Modules(), time.Now()
	r.status.Store(prev)
	r.log.Info("Policy set loaded without the rejected ConfigMaps", "modules", len(set.Modules()), "configMaps", len(keep))
}

// compile puts the ConfigMaps' policies over the built-ins and compiles the set; errors name
// the ConfigMap and key (configmap/NAME/KEY).
func (r *policyReloader) compile(ctx context.Context, cms []corev1.ConfigMap) ([]policy.Module, map[string]any, *policy.Set, error) {
	return r.compileOverlay(ctx, r.builtin, r.builtinParams, admission.PolicySources(cms))
}

// ready is the readiness check: a replica is ready once it has read the policy ConfigMaps, whether
// their set loaded or was rejected (then the set it had before serves).
func (r *policyReloader) ready(*http.Request) error {
	select {
	case <-r.readSignal():
		return nil
	default:
		return errors.New("the policy ConfigMaps are not loaded yet")
	}
}

// waitRead waits until the ConfigMaps have been read once, as ready tells, and says whether they
// have (false: ctx ended first).
func (r *policyReloader) waitRead(ctx context.Context) bool {
	select {
	case <-r.readSignal():
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *policyReloader) readSignal() chan struct{} {
	r.readInit.Do(func() { r.read = make(chan struct{}) })
	return r.read
}

// ServeHTTP serves /policy-status.
func (r *policyReloader) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.status.Load())
}
