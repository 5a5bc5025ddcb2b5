// Package webhookserver assembles the daemonguard webhook process: controller-runtime's webhook
// server (TLS reloaded by its certwatcher) with the admission handlers, the policy set hot-reloaded
// from labelled ConfigMaps, and the periodic audit on the elected leader.
package webhookserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/daemonguard/daemonguard/internal/audit"
	"github.com/daemonguard/daemonguard/internal/kubeevents"
	"github.com/daemonguard/daemonguard/internal/leadership"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/selftls"
	"github.com/daemonguard/daemonguard/webhook"
)

// auditLease is the Lease (in the webhook's namespace) whose holder runs the audit.
const auditLease = "daemonguard-webhook"

// Options configure the webhook server.
type Options struct {
	RESTConfig *rest.Config
	// Namespace is daemonguard's own namespace: always exempt, and home of the policy ConfigMaps.
	Namespace string
	// ExemptNamespaces are exempt in addition to Namespace and kube-system.
	ExemptNamespaces []string
	Host             string
	Port             int
	CertDir          string // holds tls.crt and tls.key; reloaded when they change
	MetricsAddr      string // "0" disables
	HealthAddr       string
	FailureMode      webhook.FailureMode
	// AuditInterval is how often stored DaemonSets are audited; 0 turns the audit off.
	AuditInterval time.Duration
	// OpenReports makes the audit also write OpenReports Reports (needs the CRD and RBAC; without
	// them each pass logs and counts the error, Events and metrics go on).
	OpenReports bool
	// LeaderElection makes replicas elect one leader for the audit (admission runs on all).
	LeaderElection bool
	// SelfManagedTLS, when set, makes the webhook keep its own CA and serving certificate in a
	// Secret and write them to CertDir; when nil, CertDir is a mounted Secret (cert-manager).
	SelfManagedTLS *selftls.Options
	// InProcessInjectionPolicy names the MutatingAdmissionPolicy that injects in place of the
	// DaemonSet mutating webhook (internal/inprocess); "" when the webhook injects. The webhook
	// then reports in /policy-status, and with an Event, whether that policy still does what the
	// policy set in force decides.
	InProcessInjectionPolicy string
	Log                      logr.Logger
}

// Run serves the admission webhooks until ctx ends. The policy set starts as the built-ins and
// follows the labelled ConfigMaps: a set that fails to compile is reported (an Event and
// webhook.PolicyErrorAnnotation on the ConfigMaps at fault) and the last good set keeps serving.
func Run(ctx context.Context, opts Options) error {
	log := opts.Log
	builtin, builtinParams, err := policy.Builtin()
	if err != nil {
		return err
	}
	initial, err := policy.Compile(ctx, builtin, builtinParams)
	if err != nil {
		return fmt.Errorf("compile built-in policies: %w", err)
	}
	engine := policy.NewEngine(initial)

	policySelector := labels.SelectorFromSet(labels.Set{webhook.PolicyConfigMapLabel: "true"})
	byObject := map[client.Object]cache.ByObject{
		// Only the policy ConfigMaps of our own namespace: no cluster-wide ConfigMap access.
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}, Label: policySelector},
		// Nodes are needed for labels and taints only; dropping status and managed fields keeps
		// the cache small at thousands of nodes.
		&corev1.Node{}: {Transform: stripNode},
	}
	if opts.SelfManagedTLS != nil {
		tlsOpts := *opts.SelfManagedTLS
		tlsOpts.Namespace, tlsOpts.CertDir = opts.Namespace, opts.CertDir
		if err := tlsOpts.Validate(); err != nil {
			return err
		}
		opts.SelfManagedTLS = &tlsOpts
		maps.Copy(byObject, selftls.CacheOptions(tlsOpts))
	}
	mgr, err := ctrl.NewManager(opts.RESTConfig, ctrl.Options{
		Logger:  log,
		Cache:   cache.Options{ByObject: byObject},
		Metrics: metricsserver.Options{BindAddress: opts.MetricsAddr},
		// No leader election here: the manager's ends the process when its lease cannot be
		// renewed, and admission must not depend on the audit's lease (see auditLease).
		HealthProbeBindAddress: opts.HealthAddr,
		WebhookServer: crwebhook.NewServer(crwebhook.Options{
			Host: opts.Host, Port: opts.Port, CertDir: opts.CertDir, CertName: "tls.crt", KeyName: "tls.key",
		}),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	reader := mgr.GetCache()
	exempt := webhook.ExemptNamespaces(opts.Namespace, opts.ExemptNamespaces)
	handlers := &webhook.Handlers{
		Engine:           engine,
		ExemptNamespaces: exempt,
		FailureMode:      opts.FailureMode,
		Log:              log.WithName("admission"),
		Facts:            webhook.ReaderFacts(reader),
	}
	server := mgr.GetWebhookServer()
	for path, endpoint := range handlers.Endpoints() {
		server.Register(path, endpoint)
	}

	clientset, err := kubernetes.NewForConfig(opts.RESTConfig)
	if err != nil {
		return fmt.Errorf("create client: %w", err)
	}
	// Stopped after the manager, when the last reload and audit have recorded their Events.
	eventClient, err := kubeevents.Start(clientset, log.WithName("events"))
	if err != nil {
		return err
	}
	defer eventClient.Stop()
	reloader := &policyReloader{
		client: mgr.GetClient(), namespace: opts.Namespace, selector: policySelector,
		engine: engine, builtin: builtin, builtinParams: builtinParams,
		recorder: eventClient.NewRecorder("daemonguard-webhook"), log: log.WithName("policies"),
	}
	reloader.status.Store(PolicyStatus{Healthy: true, Modules: initial.Modules(), LoadedAt: time.Now()})
	if opts.InProcessInjectionPolicy != "" {
		reloader.inProcess = &inProcessCheck{policy: opts.InProcessInjectionPolicy, reader: mgr.GetAPIReader(),
			modules: builtin, params: builtinParams}
		// Checked after every reload, and every inProcessRecheck besides: the policy itself can
		// change or go away without a ConfigMap changing.
		if err := mgr.Add(everyReplica(reloader.recheckInProcess)); err != nil {
			return err
		}
	}
	// Every replica serves admission, so every replica follows the policy ConfigMaps, not only
	// the leader (which runs the audit). SkipNameValidation lets a process run the server again
	// after stopping it (the tests' harness does, on a shared cluster). Annotation-only updates
	// (the policy error this reloader writes) reload nothing.
	if err := ctrl.NewControllerManagedBy(mgr).Named("policy-configmaps").For(&corev1.ConfigMap{}, builder.WithPredicates(policyContentChanged)).
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true), NeedLeaderElection: ptr.To(false)}).Complete(reloader); err != nil {
		return err
	}
	// The first reload runs once the cache has synced, also when no policy ConfigMap exists (the
	// controller above is only called for ConfigMaps that do); the replica is not ready before it,
	// so a new replica never admits what the ConfigMaps' policies deny.
	if err := mgr.Add(everyReplica(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil // stopped before the cache synced
		}
		if _, err := reloader.Reconcile(ctx, reconcile.Request{}); err != nil {
			log.Error(err, "Reading the policy ConfigMaps failed; the replica is not ready until a reload reads them")
		}
		return nil
	})); err != nil {
		return err
	}
	if opts.AuditInterval > 0 {
		auditor := &audit.Auditor{
			Reader: mgr.GetCache(), Engine: engine, Interval: opts.AuditInterval, Exempt: exempt,
			Recorder: eventClient.NewRecorder("daemonguard-audit"), Log: log.WithName("audit"),
		}
		if opts.OpenReports {
			if auditor.Reports, err = audit.NewReportWriter(opts.RESTConfig); err != nil {
				return err
			}
		}
		runAudit := func(ctx context.Context) error { return auditor.Start(ctx) }
		if opts.LeaderElection {
			// Only the holder of the audit's lease audits, so replicas do not multiply the
			// Events; a replica that loses the lease stops auditing and campaigns again, and
			// keeps serving admission all along.
			runAudit = func(ctx context.Context) error {
				return leadership.Campaign(ctx, opts.RESTConfig, opts.Namespace, auditLease, log.WithName("audit"), func(ctx context.Context) {
					if err := auditor.Start(ctx); err != nil {
						log.Error(err, "Audit stopped")
					}
				})
			}
		}
		if err := mgr.Add(everyReplica(runAudit)); err != nil {
			return err
		}
	}
	if opts.SelfManagedTLS != nil {
		rotator := selftls.NewRotator(mgr.GetClient(), *opts.SelfManagedTLS, log.WithName("tls"))
		// The webhook server's certwatcher needs a certificate on disk before it starts.
		if err := rotator.Bootstrap(ctx, mgr.GetAPIReader()); err != nil {
			return err
		}
		if err := rotator.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", server.StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("policies", reloader.ready); err != nil {
		return err
	}
	if opts.MetricsAddr != "0" {
		if err := mgr.AddMetricsServerExtraHandler("/policy-status", reloader); err != nil {
			return err
		}
	}
	log.Info("Starting admission webhooks", "port", opts.Port, "namespace", opts.Namespace, "policies", len(initial.Modules()))
	return mgr.Start(ctx)
}

func stripNode(obj any) (any, error) {
	if n, ok := obj.(*corev1.Node); ok {
		n.ManagedFields = nil
		n.Status = corev1.NodeStatus{}
		n.Annotations = nil
	}
	return obj, nil
}

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

func init() {
	policySetHealthy.Set(1)
	metrics.Registry.MustRegister(policySetHealthy, policyReloads)
}

// policyReloader recompiles the whole policy set whenever a labelled ConfigMap changes.
type policyReloader struct {
	client        client.Client
	namespace     string
	selector      labels.Selector
	engine        *policy.Engine
	builtin       []policy.Module
	builtinParams map[string]any
	recorder      events.EventRecorder
	log           logr.Logger
	mu            sync.Mutex // one reload at a time
	status        atomicStatus
	loaded        atomic.Bool     // the ConfigMaps have been read once: until then only the built-ins serve
	hasGoodSet    bool            // a set compiled from the ConfigMaps has loaded in this process (under mu)
	inProcess     *inProcessCheck // nil when the webhook injects
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
	defer r.loaded.Store(true)
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
	sources := make([]policy.Source, len(cms))
	for i, cm := range cms {
		sources[i] = policy.Source{Name: "configmap/" + cm.Name, Files: cm.Data}
	}
	modules, params, err := policy.Overlay(r.builtin, r.builtinParams, sources)
	if err != nil {
		return nil, nil, nil, err
	}
	set, err := policy.Compile(ctx, modules, params)
	return modules, params, set, err
}

// ready is the readiness check: a replica is ready once it has read the policy ConfigMaps, whether
// their set loaded or was rejected (then the set it had before serves).
func (r *policyReloader) ready(*http.Request) error {
	if !r.loaded.Load() {
		return errors.New("the policy ConfigMaps are not loaded yet")
	}
	return nil
}

// ServeHTTP serves /policy-status.
func (r *policyReloader) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.status.Load())
}
