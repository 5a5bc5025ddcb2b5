// Package webhookserver assembles the daemonguard webhook process. Each of its jobs has a file:
// server.go wires the process (controller-runtime's webhook server with TLS reloaded by its
// certwatcher, served as internal/serving decides, the admission handlers, the audit on the holder
// of its lease); reloader.go
// hot-reloads the policy set from labelled ConfigMaps; policyerrors.go writes a rejected set's
// errors onto the ConfigMaps at fault; inprocessdrift.go checks that the in-process injection
// policy still follows the policy set in force.
package webhookserver

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/audit"
	"github.com/daemonguard/daemonguard/internal/kubeevents"
	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/internal/leadership"
	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/selftls"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/webhook"
)

// auditLease is the Lease (in the webhook's namespace) whose holder runs the audit.
const auditLease = "daemonguard-webhook"

// PolicyStatusPath is where the metrics server serves the policy set's status (PolicyStatus),
// behind the same authentication and authorization as /metrics.
const PolicyStatusPath = "/policy-status"

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
	// MetricsAddr serves /metrics and PolicyStatusPath over HTTPS with the certificate in CertDir,
	// to authenticated and authorized clients only (see internal/serving); "0" disables.
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz over plain HTTP, for the kubelet.
	HealthAddr string
	// Serving says how the webhook and metrics servers serve (HTTP/2, timeouts).
	Serving     serving.Options
	FailureMode admission.FailureMode
	// AuditInterval is how often stored DaemonSets are audited; 0 turns the audit off.
	AuditInterval time.Duration
	// OpenReports makes the audit also write OpenReports Reports (needs the CRD and RBAC; without
	// them each pass logs and counts the error, Events and metrics go on).
	OpenReports bool
	// LeaderElection makes replicas elect one leader for the audit (admission runs on all).
	LeaderElection bool
	// AuditLeaseTiming is the audit lease's timing; zero means leadership's constants.
	AuditLeaseTiming leadership.Timing
	// SelfManagedTLS, when set, makes the webhook keep its own CA and serving certificate in a
	// Secret and write them to CertDir; when nil, CertDir is a mounted Secret (cert-manager).
	SelfManagedTLS *selftls.Options
	// InProcessInjectionPolicy names the MutatingAdmissionPolicy that injects in place of the
	// DaemonSet mutating webhook (internal/inprocess); "" when the webhook injects. The webhook
	// then reports in /policy-status, and with an Event, whether that policy still does what the
	// policy set in force decides.
	InProcessInjectionPolicy string
	// PolicyLoadTimeout bounds each load of a policy set (compile, enforcement rules, trial); a
	// set that exceeds it is rejected like one that does not compile. 0 means the default.
	PolicyLoadTimeout time.Duration
	// EvaluationBounds bound each admission evaluation: the server's deadline, how many run at
	// once, the heap past which they are cancelled and refused. Zero fields take
	// webhook.DefaultBounds'.
	EvaluationBounds webhook.Bounds
	// ShutdownDelay is how long the replica goes on answering reviews once ctx ends, not ready
	// and closing each connection after its answer, before its servers stop (see gracefulStop).
	ShutdownDelay time.Duration
	Log           logr.Logger
}

// Run serves the admission webhooks until ctx ends. The policy set starts as the built-ins and
// follows the labelled ConfigMaps: a set that fails to compile is reported (an Event and
// admission.PolicyErrorAnnotation on the ConfigMaps at fault) and the last good set keeps serving.
func Run(ctx context.Context, opts Options) error {
	registerMetrics()
	log := opts.Log
	builtin, builtinParams, err := policy.Builtin()
	if err != nil {
		return err
	}
	limits := policy.DefaultLimits
	if opts.PolicyLoadTimeout > 0 {
		limits.Timeout = opts.PolicyLoadTimeout
	}
	initial, err := limits.Compile(ctx, builtin, builtinParams)
	if err != nil {
		return fmt.Errorf("compile built-in policies: %w", err)
	}
	engine := policy.NewEngine(initial)

	policySelector := labels.SelectorFromSet(labels.Set{admission.PolicyConfigMapLabel: "true"})
	byObject := map[client.Object]cache.ByObject{
		// Only the policy ConfigMaps of our own namespace: no cluster-wide ConfigMap access.
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{opts.Namespace: {}}, Label: policySelector},
		// Nodes are needed for labels and taints only (see nodes.Strip).
		&corev1.Node{}: {Transform: nodes.Strip},
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
		Logger: log,
		Cache:  cache.Options{ByObject: byObject},
		// The metrics server serves the webhook's own certificate, so a scraper can verify it
		// with the CA the API server trusts for admission.
		Metrics: opts.Serving.Metrics(opts.MetricsAddr, opts.CertDir),
		// No leader election here: the manager's ends the process when its lease cannot be
		// renewed, and admission must not depend on the audit's lease (see auditLease).
		HealthProbeBindAddress: opts.HealthAddr,
		WebhookServer: opts.Serving.WebhookServer(crwebhook.Options{
			Host: opts.Host, Port: opts.Port, CertDir: opts.CertDir, CertName: "tls.crt", KeyName: "tls.key",
		}),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}

	// Admission does not depend on the server's version; in-process injection does. A server that
	// cannot say is logged here and found out by the manager, which needs it too.
	apiServer, err := kubesupport.Announce(ctx, opts.RESTConfig, log)
	inProcessUnavailable := apiServer.InProcessInjection()
	if err != nil {
		log.Error(err, "Cannot tell the Kubernetes version")
		inProcessUnavailable = fmt.Errorf("cannot tell whether the API server serves %s MutatingAdmissionPolicy: %w", kubesupport.MutatingAdmissionPolicyAPI, err)
	}

	reader := mgr.GetCache()
	// Reviews read namespaces, nodes and priority classes from the cache. Registering their
	// informers now starts them with the cache, so the first policy reload, which waits for the
	// cache to sync, waits for them too: a new replica is not Ready while its first review would
	// still have to list every namespace and node inside the API server's webhook timeout.
	var nodeInformer cache.Informer
	for _, obj := range []client.Object{&corev1.Namespace{}, &corev1.Node{}, &schedulingv1.PriorityClass{}} {
		informer, err := reader.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
		if _, ok := obj.(*corev1.Node); ok {
			nodeInformer = informer
		}
	}
	// Reviews share one list of the nodes, listed again after the node informer reports a change.
	lookups := admission.ReaderLookups(reader, mgr.GetAPIReader())
	nodeSnapshot := admission.NewNodeSnapshot(lookups.Nodes)
	lookups.Nodes = nodeSnapshot.Nodes
	if _, err := nodeInformer.AddEventHandler(nodeSnapshot.EventHandler()); err != nil {
		return fmt.Errorf("watch nodes: %w", err)
	}
	exempt := admission.ExemptNamespaces(opts.Namespace, opts.ExemptNamespaces)
	stop := &gracefulStop{}
	handlers := &webhook.Handlers{
		Engine:           engine,
		ExemptNamespaces: exempt,
		FailureMode:      opts.FailureMode,
		Log:              log.WithName("admission"),
		Lookups:          lookups,
		Bounds:           opts.EvaluationBounds,
		// Set from ctx's end, before the server shuts down and ends the requests in flight.
		Stopping: stop.stopping.Load,
	}
	server := mgr.GetWebhookServer()
	for path, endpoint := range handlers.Endpoints() {
		server.Register(path, stop.closeAfterAnswer(endpoint))
	}

	// Stopped after the manager, when the last reload and audit have recorded their Events.
	eventClient, err := kubeevents.Start(opts.RESTConfig, log.WithName("events"))
	if err != nil {
		return err
	}
	defer eventClient.Stop()
	reloader := &policyReloader{
		client: mgr.GetClient(), namespace: opts.Namespace, selector: policySelector,
		engine: engine, builtin: builtin, builtinParams: builtinParams, compileOverlay: limits.CompileOverlay,
		recorder: eventClient.NewRecorder("daemonguard-webhook"), log: log.WithName("policies"),
	}
	reloader.status.Store(PolicyStatus{Healthy: true, Modules: initial.Modules(), LoadedAt: time.Now()})
	if opts.InProcessInjectionPolicy != "" {
		reloader.inProcess = &inProcessCheck{policy: opts.InProcessInjectionPolicy, reader: mgr.GetAPIReader(),
			modules: builtin, params: builtinParams, unavailable: inProcessUnavailable}
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
	// runAudit audits every AuditInterval until ctx ends; with the audit off it only waits.
	runAudit := func(ctx context.Context) { <-ctx.Done() }
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
		runAudit = afterFirstRead(reloader, func(ctx context.Context) {
			if err := auditor.Start(ctx); err != nil {
				log.Error(err, "Audit stopped")
			}
		})
	}
	switch {
	case opts.LeaderElection:
		// Only the holder of the audit's lease audits, so replicas do not multiply the Events;
		// a replica that loses the lease stops auditing and campaigns again, and keeps serving
		// admission all along.
		if err := mgr.Add(everyReplica(func(ctx context.Context) error {
			return leadership.Campaign(ctx, opts.RESTConfig, opts.Namespace, auditLease, opts.AuditLeaseTiming, log.WithName("audit"), runAudit)
		})); err != nil {
			return err
		}
	case opts.AuditInterval > 0:
		if err := mgr.Add(everyReplica(func(ctx context.Context) error { runAudit(ctx); return nil })); err != nil {
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
	if err := addReadinessChecks(mgr, map[string]healthz.Checker{
		"webhook": server.StartedChecker(), "policies": reloader.ready, "stopping": stop.ready,
	}); err != nil {
		return err
	}
	if opts.MetricsAddr != "0" {
		if err := mgr.AddMetricsServerExtraHandler(PolicyStatusPath, reloader); err != nil {
			return err
		}
	}
	log.Info("Starting admission webhooks", "port", opts.Port, "namespace", opts.Namespace, "policies", len(initial.Modules()))
	serving, release := stop.serveFor(ctx, opts.ShutdownDelay, log)
	defer release()
	return mgr.Start(serving)
}

// afterFirstRead runs audit once the policy ConfigMaps have been read: until then the engine
// holds the built-in set alone, and a pass against it would report on policies that are not in
// force (a DaemonSet a ConfigMap's parameters deny reported compliant, or the other way round).
// The lease may come long before the read, which waits for every informer to sync.
func afterFirstRead(reloader *policyReloader, audit func(context.Context)) func(context.Context) {
	return func(ctx context.Context) {
		if reloader.waitRead(ctx) {
			audit(ctx)
		}
	}
}
