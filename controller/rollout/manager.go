package rollout

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/kubeevents"
	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/internal/leadership"
	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/internal/serving"
)

// Options configure the controller process.
type Options struct {
	RESTConfig *rest.Config
	// MetricsAddr serves /metrics over HTTPS (a self-signed certificate made at start) to
	// authenticated and authorized clients only (see internal/serving); "0" disables.
	MetricsAddr string
	HealthAddr  string // plain HTTP /healthz and /readyz for the kubelet; "0" disables
	PprofAddr   string // net/http/pprof; "" or "0" disables
	// Serving says how the metrics server serves (HTTP/2, timeouts).
	Serving        serving.Options
	LeaderElection bool
	// LeaderElectionNamespace holds the Lease; required with LeaderElection outside a cluster.
	LeaderElectionNamespace string
	// Namespaces are the namespaces whose DaemonSets the controller rolls out: its cache watches
	// DaemonSets, pods and ControllerRevisions there only, so that Roles in those namespaces are
	// all the namespaced permissions it needs. Empty watches all.
	Namespaces []string
	// Prometheus is where the analysis gates are measured; without an address every measurement
	// is inconclusive and a rollout with gates waits, saying how to configure one.
	Prometheus promquery.Options
	Log        logr.Logger
	// FullReadInterval is how often a reconcile of a DaemonSet reads every pod and node while
	// its informers' events name what changed in between (follow.go); 0 is 30 seconds, and a
	// negative interval reads everything only when the memo must (tests, to see a missed event
	// rather than have it repaired).
	FullReadInterval time.Duration
}

// Run runs the rollout controller until ctx ends.
func Run(ctx context.Context, opts Options) error {
	analyzer, err := promquery.New(opts.Prometheus)
	if err != nil {
		return err
	}
	// Only pods with a revision label: the DaemonSet controller gives it to every pod it creates
	// (StatefulSets' pods carry it too), and the planner reads no other pod. A cluster runs many
	// more pods than daemon pods, and the API server filters them out before they are sent.
	daemonPods, err := labels.NewRequirement(appsv1.DefaultDaemonSetUniqueLabelKey, selection.Exists, nil)
	if err != nil {
		return err
	}
	cacheOpts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		// Keep only what the planner reads: at 5,000 nodes and pods the cache is most of the
		// controller's memory.
		&corev1.Pod{}:                {Transform: rolloutplan.StripPod, Label: labels.NewSelector().Add(*daemonPods)},
		&corev1.Node{}:               {Transform: nodes.Strip},
		&appsv1.ControllerRevision{}: {Transform: stripRevision},
	}}
	if len(opts.Namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range opts.Namespaces {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
			}
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	// Said once at start: nothing the controller does depends on the version in the supported range.
	if _, err := kubesupport.Announce(ctx, opts.RESTConfig, opts.Log); err != nil {
		opts.Log.Error(err, "Cannot tell the Kubernetes version")
	}
	cfg := rest.CopyConfig(opts.RESTConfig)
	if cfg.QPS == 0 {
		// client-go's default of 5 requests/s would cap a wave of 100 pod deletions at 20 s;
		// the API server's priority and fairness protects it from a busy controller instead.
		cfg.QPS, cfg.Burst = 200, 400
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Logger:                        opts.Log,
		Cache:                         cacheOpts,
		Metrics:                       opts.Serving.Metrics(opts.MetricsAddr, ""),
		HealthProbeBindAddress:        opts.HealthAddr,
		PprofBindAddress:              opts.PprofAddr,
		LeaderElection:                opts.LeaderElection,
		LeaderElectionID:              "daemonguard-rollout-controller",
		LeaderElectionNamespace:       opts.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 ptr.To(leadership.LeaseDuration),
		RenewDeadline:                 ptr.To(leadership.RenewDeadline),
		RetryPeriod:                   ptr.To(leadership.RetryPeriod),
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	// Stopped after mgr.Start returns, when the last reconcile has recorded its Events.
	broadcaster, err := kubeevents.Start(cfg, opts.Log.WithName("events"))
	if err != nil {
		return err
	}
	defer broadcaster.Stop()

	store, err := newStore(ctx, mgr.GetCache())
	if err != nil {
		return err
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &appsv1.ControllerRevision{}, revisionControllerIndex, func(o client.Object) []string {
		return controllerUIDs(o)
	}); err != nil {
		return fmt.Errorf("index controller revisions by controller: %w", err)
	}
	marks, err := newNamespaceMarks(ctx, mgr.GetCache(), opts.Log.WithName("namespaces"))
	if err != nil {
		return err
	}
	// On the manager's connections, with a rate limit of its own as each of the manager's
	// clients of a resource has.
	typed, err := kubernetes.NewForConfigAndClient(cfg, mgr.GetHTTPClient())
	if err != nil {
		return fmt.Errorf("create pod client: %w", err)
	}
	r := &Reconciler{
		Client: mgr.GetClient(), Store: store, Pods: typed.CoreV1(), Recorder: broadcaster.NewRecorder("daemonguard-rollout"),
		Log: opts.Log.WithName("rollout"), Clock: clock.RealClock{}, Analyzer: analyzer, APIReader: mgr.GetAPIReader(),
		Marks: marks, RevisionsIndexed: true,
	}
	if _, ok := store.(followingStore); ok {
		r.changes = newChanges(opts.FullReadInterval)
	}
	managed := predicate.NewPredicateFuncs(func(o client.Object) bool {
		ds, ok := o.(*appsv1.DaemonSet)
		return ok && rolloutapi.IsManaged(ds)
	})
	err = ctrl.NewControllerManagedBy(mgr).
		Named("daemonset-rollout").
		For(&appsv1.DaemonSet{}, builder.WithPredicates(managed)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.changes.podsOf(controllingDaemonSet))).
		Watches(&appsv1.ControllerRevision{}, handler.EnqueueRequestsFromMapFunc(controllingDaemonSet)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.changes.nodesOf(allManaged(mgr.GetClient()))), builder.WithPredicates(nodeChanged)).
		// SkipNameValidation lets a process run the controller again after stopping it (a
		// restart in place, as the restart tests do); two live instances never share a process.
		// CacheSyncTimeout: at 5,000 nodes and 150,000 pods, on a busy API server, the first list of
		// the nodes took the chart's ServiceAccount more than controller-runtime's default of 2
		// minutes, and the controller exited, to be restarted into the same wait.
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true), CacheSyncTimeout: cacheSyncTimeout}).
		Complete(r)
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	opts.Log.Info("Starting rollout controller", "leaderElection", opts.LeaderElection, "namespaces", opts.Namespaces, "prometheus", analyzer.Address())
	return mgr.Start(ctx)
}

// cacheSyncTimeout bounds the wait for the informers' first lists before the controller gives up
// and exits: long enough for a large cluster's busy API server, short enough that a controller
// without RBAC for a resource says so within minutes.
const cacheSyncTimeout = 10 * time.Minute

// nodeChanged passes node creations, deletions and the updates that change what the planner
// reads (nodes.Changed): every node's status heartbeat would otherwise replan every managed
// DaemonSet, a rate and a cost that both grow with the nodes.
var nodeChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*corev1.Node)
	cur, okCur := e.ObjectNew.(*corev1.Node)
	return !okOld || !okCur || nodes.Changed(old, cur)
}}

// controllingDaemonSet maps an event of a pod or a ControllerRevision to the DaemonSet that
// controls it, read from its controller reference (its group and kind, whatever its version), as
// handler.EnqueueRequestForOwner with OnlyControllerOwner does. That handler also resolves the
// DaemonSet's REST mapping on every event, to learn what is known here, that a DaemonSet is
// namespaced: at 1,000 nodes, 4% of the controller's CPU during a rollout.
func controllingDaemonSet(_ context.Context, obj client.Object) []reconcile.Request {
	ref := metav1.GetControllerOfNoCopy(obj)
	if ref == nil || ref.Kind != "DaemonSet" {
		return nil
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != appsv1.GroupName {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: ref.Name}}}
}

// allManaged maps a node event to every managed DaemonSet: a node joining, leaving or going
// NotReady changes every rollout's plan.
func allManaged(c client.Client) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list appsv1.DaemonSetList
		if err := c.List(ctx, &list); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if rolloutapi.IsManaged(&list.Items[i]) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return reqs
	}
}

func stripRevision(obj any) (any, error) {
	if cr, ok := obj.(*appsv1.ControllerRevision); ok {
		cr.ManagedFields = nil
		cr.Data.Raw = nil
		cr.Data.Object = nil
	}
	return obj, nil
}

// namespaceMarks reads the namespace labels of an informer of the namespaces' metadata (get, list
// and watch namespaces, cluster-wide and read-only), so that a measurement asks the API server
// nothing.
type namespaceMarks struct {
	reader client.Reader
	log    logr.Logger
}

// newNamespaceMarks gets (creating, not starting) the informer, so that the manager starts it with
// the others and waits for its first list before any reconcile.
func newNamespaceMarks(ctx context.Context, c cache.Cache, log logr.Logger) (NamespaceMarks, error) {
	if _, err := c.GetInformer(ctx, namespaceMeta()); err != nil {
		return nil, fmt.Errorf("namespace informer: %w", err)
	}
	return namespaceMarks{reader: c, log: log}, nil
}

func namespaceMeta() *metav1.PartialObjectMetadata {
	ns := &metav1.PartialObjectMetadata{}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	return ns
}

func (m namespaceMarks) Marked(ctx context.Context, namespace string) bool {
	ns := namespaceMeta()
	if err := m.reader.Get(ctx, types.NamespacedName{Name: namespace}, ns, client.UnsafeDisableDeepCopy); err != nil {
		m.log.V(1).Info("Read the namespace as unmarked: its labels are unavailable", "namespace", namespace, "err", err)
		return false
	}
	return admission.NodeAgentsNamespace(ns.Labels)
}

// controllerUIDIndex indexes pods by the UID of their controller.
const controllerUIDIndex = "daemonguard.io/controller-uid"

// revisionControllerIndex is the cache's field index of ControllerRevisions by the UID of their
// controller (Reconciler.RevisionsIndexed).
const revisionControllerIndex = ".metadata.controller.uid"

// informerStore is the Store of the manager's informers: the pod informer's index by controller
// and the node informer's store, read in place.
type informerStore struct {
	pods, nodes toolscache.Indexer
}

// newStore gets (creating, not starting) the pod and node informers the controller's watches
// share and reads them in place. A cache limited to namespaces (--namespaces) wraps one
// informer per namespace; there the Store lists through the cache reader, without copies too.
func newStore(ctx context.Context, c cache.Cache) (Store, error) {
	indexer := func(obj client.Object) (toolscache.Indexer, error) {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return nil, err
		}
		if shared, ok := inf.(toolscache.SharedIndexInformer); ok {
			return shared.GetIndexer(), nil
		}
		return nil, nil
	}
	pods, err := indexer(&corev1.Pod{})
	if err != nil {
		return nil, err
	}
	nodes, err := indexer(&corev1.Node{})
	if err != nil {
		return nil, err
	}
	if pods == nil || nodes == nil {
		return readerStore{c}, nil
	}
	if err := pods.AddIndexers(toolscache.Indexers{controllerUIDIndex: controllerUID}); err != nil {
		return nil, fmt.Errorf("index pods by controller: %w", err)
	}
	return &informerStore{pods: pods, nodes: nodes}, nil
}

func controllerUID(obj any) ([]string, error) {
	if o, ok := obj.(metav1.Object); ok {
		return controllerUIDs(o), nil
	}
	return nil, nil
}

// controllerUIDs is the UID of obj's controller, as the indexes by controller file it: none
// without a controller.
func controllerUIDs(obj metav1.Object) []string {
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil {
		return []string{string(ref.UID)}
	}
	return nil
}

func (s *informerStore) PodsOf(_ context.Context, namespace string, uid types.UID) ([]*corev1.Pod, error) {
	return s.appendPodsOf(nil, namespace, uid)
}

func (s *informerStore) Nodes(context.Context) ([]*corev1.Node, error) {
	return s.appendNodes(nil), nil
}

func (s *informerStore) appendPodsOf(dst []*corev1.Pod, _ string, uid types.UID) ([]*corev1.Pod, error) {
	objs, err := s.pods.ByIndex(controllerUIDIndex, string(uid))
	return appendTyped(dst, objs), err
}

func (s *informerStore) appendNodes(dst []*corev1.Node) []*corev1.Node {
	return appendTyped(dst, s.nodes.List())
}

// appendTyped appends the objects of objs that are Ts to dst, growing it once at most.
func appendTyped[T any](dst []T, objs []any) []T {
	dst = slices.Grow(dst, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			dst = append(dst, t)
		}
	}
	return dst
}

// readerStore is the Store of a cache reader: typed lists of the cache's objects, not copied
// (UnsafeDisableDeepCopy), filtered by controller.
type readerStore struct{ c client.Reader }

func (s readerStore) PodsOf(ctx context.Context, namespace string, uid types.UID) ([]*corev1.Pod, error) {
	var list corev1.PodList
	if err := s.c.List(ctx, &list, client.InNamespace(namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []*corev1.Pod
	for i := range list.Items {
		if ref := metav1.GetControllerOfNoCopy(&list.Items[i]); ref != nil && ref.UID == uid {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

func (s readerStore) Nodes(ctx context.Context) ([]*corev1.Node, error) {
	var list corev1.NodeList
	if err := s.c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	out := make([]*corev1.Node, len(list.Items))
	for i := range list.Items {
		out[i] = &list.Items[i]
	}
	return out, nil
}
