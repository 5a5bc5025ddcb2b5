package rollout

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Reconciler rolls out one managed DaemonSet per call: gather (this file, reads only), decide
// (decide.go, pure, with the planner of controller/rolloutplan) and apply (apply.go, every write
// and metric).
type Reconciler struct {
	Client client.Client // reads from the cache, writes to the API server
	Store  Store         // pods and nodes, read from the cache without copies
	// Pods deletes pods (client-go's typed client); nil deletes through Client. Its Delete
	// reads the answer's status alone, where controller-runtime's decodes the deleted pod,
	// encodes it as JSON and decodes that into a map: at 1,000 nodes, a tenth of the
	// controller's CPU during a rollout.
	Pods     corev1client.PodsGetter
	Recorder events.EventRecorder
	Log      logr.Logger
	// Clock is a test seam; production uses the real clock.
	Clock clock.PassiveClock
	// Analyzer measures the analysis gates a reconcile finds due; nil answers every measurement
	// as if no Prometheus were configured.
	Analyzer Analyzer
	// APIReader reads from the API server, past the cache: the cache strips ControllerRevisions'
	// data, which a rollback puts back. Nil reads through Client.
	APIReader client.Reader
	// RevisionsIndexed says that Client's cache indexes ControllerRevisions by their controller's
	// UID (revisionControllerIndex, which Run registers): a reconcile then lists its DaemonSet's
	// revisions alone, where a namespace of many DaemonSets holds up to eleven of each. False
	// lists the namespace's revisions (a client without the index).
	RevisionsIndexed bool
	// Marks tells the namespaces an administrator marked for node agents, whose gates read what
	// their queries name; every other gate reads its own namespace's series only. Nil counts
	// every namespace as unmarked.
	Marks NamespaceMarks

	// deleted remembers pods this process deleted until the cache shows them terminating or
	// gone, so a lagging cache never makes the planner spend the same budget twice. After a
	// restart it is empty, and the cache, freshly listed, has no lag to cover. A map once set
	// here is never changed (remember and forgetSettled set a new one), so each reconcile's
	// Facts share it without a copy: it holds a minute of deletions of every DaemonSet (most of a
	// 1,000-node rollout's), and a copy per reconcile was 15% of a reconcile's allocations with
	// 500 (BenchmarkReconcileGatherDecide).
	mu      sync.Mutex
	deleted map[types.UID]time.Time
	// deletedGen numbers each map set in deleted (Observed.DeletedGen), so that a memo marks
	// the deletions again only when they changed; deletedOldest is when its oldest was deleted.
	deletedGen    uint64
	deletedOldest time.Time
	reported      map[types.NamespacedName]time.Time // last progress report per DaemonSet
	// recorded is the last rollout Event recorded per DaemonSet (see sameEventAgain).
	recorded map[types.NamespacedName]recordedEvent
	// kept is what each managed DaemonSet's reconciles keep from one to the next, dropped once it
	// is gone or no longer managed (forgetMemo).
	kept map[types.NamespacedName]*keptState
	// changes are the pods and nodes changed since each DaemonSet's last reconcile, as the
	// informers' event handlers name them (follow.go), when the Store can read them by name
	// (followingStore); nil reads every pod and node on each reconcile.
	changes *changes
}

// keptState is what one managed DaemonSet's reconciles keep from one to the next.
type keptState struct {
	// memo remembers the classification of its pods and the nodes (rolloutplan.Memo).
	memo rolloutplan.Memo
	// pods and nodes are the slices its last reconcile read into, which the next reconcile reads
	// into again (appendingStore). Reconciles of one DaemonSet never overlap (the work queue hands
	// out a key once at a time), and a reconcile's Facts do not outlive it, so the next reconcile
	// may fill them again. Past the length of a list that shrank they keep the objects the cache
	// held a reconcile ago, until the next read, a reconcile that follows (which empties them) or
	// forgetMemo.
	pods  []*corev1.Pod
	nodes []*corev1.Node
}

// Reconcile implements reconcile.Reconciler: gather the facts, decide (pure), apply the writes.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := r.Log.WithValues("daemonset", req.NamespacedName)
	var ds appsv1.DaemonSet
	if err := r.Client.Get(ctx, req.NamespacedName, &ds); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetMemo(req.NamespacedName)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !rolloutapi.IsManaged(&ds) || ds.DeletionTimestamp != nil {
		r.forgetMemo(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	facts, err := r.gather(ctx, log, &ds)
	if err != nil {
		return reconcile.Result{}, err
	}
	d := decide(facts)
	if err := r.apply(ctx, log, &ds, d, facts.Now); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
}

// Analyzer takes the measurements of analysis gates (internal/promquery against Prometheus). It
// returns one Measurement per query, in order, with Err saying why one has no answer.
type Analyzer interface {
	// Scope is what the gates of a DaemonSet of namespace read (rolloutanalysis.Scope): its own series, or,
	// marked for node agents, what the queries name.
	Scope(namespace string, marked bool) rolloutanalysis.Scope
	// Measure runs req's queries kept to scope.
	Measure(ctx context.Context, req rolloutanalysis.Request, scope rolloutanalysis.Scope) []rolloutanalysis.Measurement
}

// NamespaceMarks reads whether an administrator marked a namespace for node agents
// (admission.NodeAgentsNamespace). A namespace that cannot be read is unmarked: a gate reads
// less, never more, on a guess.
type NamespaceMarks interface {
	Marked(ctx context.Context, namespace string) bool
}

// appendingStore is a Store that appends what it reads to a caller's slices, which the caller
// reuses from one read to the next (keptState): PodsOf and Nodes with the slices given.
type appendingStore interface {
	appendPodsOf(dst []*corev1.Pod, namespace string, uid types.UID) ([]*corev1.Pod, error)
	appendNodes(dst []*corev1.Node) []*corev1.Node
}

// Store reads the informers' own objects, without copying them: on 1,000 nodes, copying every
// node and pod into a typed list on each reconcile cost more than the rest of the reconcile. What
// it returns is shared with the cache and must never be modified.
type Store interface {
	// PodsOf returns the pods of the namespace whose controller has this UID.
	PodsOf(ctx context.Context, namespace string, uid types.UID) ([]*corev1.Pod, error)
	// Nodes returns every node.
	Nodes(ctx context.Context) ([]*corev1.Node, error)
}

// gather reads what one reconcile of ds needs, reading the clock once: the settings, the status
// annotations, the last report, the pods this process deleted and, once the current template's
// revision is known, the DaemonSet's revisions and pods and every node, and then the analysis
// gates' measurements that are due. It only reads: planning with what it read is decide's.
// Settings that do not parse end the reading.
func (r *Reconciler) gather(ctx context.Context, log logr.Logger, ds *appsv1.DaemonSet) (Facts, error) {
	f := Facts{Observed: rolloutplan.Observed{Now: r.Clock.Now(), DaemonSet: ds}}
	key := client.ObjectKeyFromObject(ds)
	r.mu.Lock()
	f.LastReport = r.reported[key]
	f.Deleted, f.DeletedGen = r.deleted, r.deletedGen // never changed once set (see deleted)
	if r.kept[key] == nil {
		if r.kept == nil {
			r.kept = map[types.NamespacedName]*keptState{}
		}
		r.kept[key] = &keptState{}
	}
	kept := r.kept[key]
	f.Memo = &kept.memo
	r.mu.Unlock()
	hasRead := false
	defer func() {
		if !hasRead { // a reconcile that does not read stops following: the next one reads everything
			r.changes.drop(key)
		}
	}()
	if f.Settings, f.SettingsErr = rolloutapi.ParseSettings(ds.Annotations); f.SettingsErr != nil {
		return f, nil
	}
	status, err := rolloutapi.DecodeStatus(ds.Annotations)
	if err != nil {
		// Status annotations are not admission-checked; the planner treats what is missing as a
		// fresh start of that part of its state.
		log.Info("Ignored malformed status annotations", "err", err)
	}
	f.Status, f.StatusErr = status, err
	// Unknown until the DaemonSet controller has observed the generation and created the
	// revision of the new template.
	if f.Revisions, err = r.revisions(ctx, ds); err != nil {
		return f, err
	}
	if f.TargetRevision = rolloutapi.CurrentRevisionHash(ds, f.Revisions); f.TargetRevision == "" {
		return f, nil
	}
	if f.Pods, f.Nodes, f.Followed, err = r.read(ctx, f.Observed, kept); err != nil {
		return f, err
	}
	hasRead = true
	// Measured here, with the reconcile's context, so that decide stays pure: the planner asks
	// from the same state what Compute will judge.
	if len(f.Settings.Gates) > 0 {
		if req := f.Memo.DueAnalysis(f.Observed); req != nil {
			marked := r.Marks != nil && r.Marks.Marked(ctx, ds.Namespace)
			a := r.analyzer()
			f.Measurements = a.Measure(ctx, *req, a.Scope(ds.Namespace, marked))
		}
	}
	return f, nil
}

// read reads ds's pods and every node from the Store, into kept's slices when the Store can
// (appendingStore): at 5,000 nodes a new pair of slices was 80 KB per reconcile. A followed
// DaemonSet (changes) reads only the pods and nodes changed since its last reconcile, and
// brings its memo up to date with them (followed, with no pods and no nodes); when the memo
// refuses, or the DaemonSet is not followed, it is followed from now and everything is read.
func (r *Reconciler) read(ctx context.Context, o rolloutplan.Observed, kept *keptState) (pods []*corev1.Pod, nodes []*corev1.Node, followed bool, err error) {
	ds := o.DaemonSet
	if s, ok := r.Store.(followingStore); ok && r.changes != nil {
		key := client.ObjectKeyFromObject(ds)
		if podNames, nodeNames, ok := r.changes.drain(key, ds.UID, o.Now); ok {
			ch, err := s.changed(ds.Namespace, ds.UID, podNames, nodeNames)
			if err == nil && kept.memo.Follow(o, ch) {
				// The memo holds what it needs: let go of the objects the last read held, once
				// (a read sets the lengths, and nothing else writes to the slices).
				if len(kept.pods) > 0 || len(kept.nodes) > 0 {
					clear(kept.pods[:cap(kept.pods)])
					clear(kept.nodes[:cap(kept.nodes)])
					kept.pods, kept.nodes = kept.pods[:0], kept.nodes[:0]
				}
				return nil, nil, true, nil
			}
		}
		// Before the read: a change the read misses is marked, and one it sees is marked too.
		kept.memo.MustRead()
		r.changes.arm(key, ds.UID, o.Now)
	}
	if s, ok := r.Store.(appendingStore); ok {
		pods, err := s.appendPodsOf(kept.pods[:0], ds.Namespace, ds.UID)
		if err != nil {
			return nil, nil, false, fmt.Errorf("list pods: %w", err)
		}
		kept.pods, kept.nodes = pods, s.appendNodes(kept.nodes[:0])
		return kept.pods, kept.nodes, false, nil
	}
	if pods, err = r.Store.PodsOf(ctx, ds.Namespace, ds.UID); err != nil {
		return nil, nil, false, fmt.Errorf("list pods: %w", err)
	}
	if nodes, err = r.Store.Nodes(ctx); err != nil {
		return nil, nil, false, fmt.Errorf("list nodes: %w", err)
	}
	return pods, nodes, false, nil
}

// forgetMemo drops the memo of a DaemonSet that is gone or no longer managed, and with it what it
// remembered of the DaemonSet's pods and of every node, and the slices it read them into.
func (r *Reconciler) forgetMemo(key types.NamespacedName) {
	r.changes.drop(key)
	r.mu.Lock()
	delete(r.kept, key)
	r.mu.Unlock()
}

func (r *Reconciler) analyzer() Analyzer {
	if r.Analyzer == nil {
		return &promquery.Client{}
	}
	return r.Analyzer
}

// revisions are the ControllerRevisions ds controls, shared with the cache (their data stripped):
// the current template's revision is the newest of ds's, and a rollback looks up the one it puts
// back. They are listed by the cache's index of controllers when it has one (RevisionsIndexed),
// else from the namespace's; either way only those ds controls are kept.
func (r *Reconciler) revisions(ctx context.Context, ds *appsv1.DaemonSet) ([]*appsv1.ControllerRevision, error) {
	var list appsv1.ControllerRevisionList
	opts := []client.ListOption{client.InNamespace(ds.Namespace), client.UnsafeDisableDeepCopy}
	if r.RevisionsIndexed {
		opts = append(opts, client.MatchingFields{revisionControllerIndex: string(ds.UID)})
	}
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("list controller revisions: %w", err)
	}
	revs := make([]*appsv1.ControllerRevision, 0, len(list.Items))
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], ds) {
			revs = append(revs, &list.Items[i])
		}
	}
	return revs, nil
}
