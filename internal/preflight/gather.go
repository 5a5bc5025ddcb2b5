package preflight

// This file reads the cluster once for every document of a run (readCluster): nodes, unfinished
// pods (streamed and slimmed), pod disruption budgets, priority classes, daemonguard's DaemonSet
// webhooks, found by their names, and the policy set they serve; namespaces' labels as documents
// need them. Over a fleet, EachContext reads the clusters side by side, a bounded number at once.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// clusterView is what the plan reads once for every document.
type clusterView struct {
	nodes           []*corev1.Node
	pods            []*corev1.Pod
	budgets         []*policyv1.PodDisruptionBudget
	priorityClasses map[string]int32
	preemptNever    map[string]bool
	defaultPriority string // the globalDefault PriorityClass, if any
	mutating        *admissionregistrationv1.MutatingWebhook
	validating      *admissionregistrationv1.ValidatingWebhook
	policies        *policy.Set
	policySource    string // AdmissionReport.Policies
	namespaces      map[string]map[string]string
}

// readCluster reads what every document's plan needs: nodes, unfinished pods, pod disruption
// budgets, priority classes, daemonguard's DaemonSet webhooks and its policy set.
func readCluster(ctx context.Context, client kubernetes.Interface, policyNS string) (*clusterView, error) {
	v := &clusterView{priorityClasses: map[string]int32{}, preemptNever: map[string]bool{}, namespaces: map[string]map[string]string{}}
	nodeList, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodeList.Items {
		v.nodes = append(v.nodes, &nodeList.Items[i])
	}
	if v.pods, err = readPods(ctx, client); err != nil {
		return nil, err
	}
	budgets, err := client.PolicyV1().PodDisruptionBudgets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list pod disruption budgets: %w", err)
	}
	for i := range budgets.Items {
		v.budgets = append(v.budgets, &budgets.Items[i])
	}
	classes, err := client.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list priority classes: %w", err)
	}
	for _, pc := range classes.Items {
		v.priorityClasses[pc.Name] = pc.Value
		v.preemptNever[pc.Name] = pc.PreemptionPolicy != nil && *pc.PreemptionPolicy == corev1.PreemptNever
		if pc.GlobalDefault {
			v.defaultPriority = pc.Name
		}
	}
	if err := v.readAdmission(ctx, client, policyNS); err != nil {
		return nil, err
	}
	return v, nil
}

// slimPod drops from a listed pod what no part of the plan reads: managed fields, annotations,
// volumes, and each container's environment, mounts, command, probes and hooks. A plan holds
// every pod of the cluster at once, and those are most of a pod's bytes. What the plan reads
// stays: labels and owners, the node, priority, each container's requests, limits, ports and
// restart policy, the overhead and the status.
func slimPod(p *corev1.Pod) *corev1.Pod {
	p.ManagedFields, p.Annotations = nil, nil
	p.Spec.Volumes, p.Spec.EphemeralContainers = nil, nil
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			c := &list[i]
			c.Env, c.EnvFrom, c.VolumeMounts, c.VolumeDevices, c.Command, c.Args = nil, nil, nil, nil, nil, nil
			c.LivenessProbe, c.ReadinessProbe, c.StartupProbe, c.Lifecycle = nil, nil, nil, nil
		}
	}
	return p
}

// readPods reads every unfinished pod of the cluster, slimmed, in the API's order (by
// namespace/name). It reads them as client-go's informers do: streamed from the API server's watch
// cache (watch-list) where the server supports it, else listed. A paged list would cost the API
// server more than linear in pods, since each page of its watch cache starts by collecting every
// pod from the page's first to the last; a stream is one pass. The stream needs watch on pods;
// with list alone, client-go falls back to one list.
func readPods(ctx context.Context, client kubernetes.Interface) ([]*corev1.Pod, error) {
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "status.phase!=Succeeded,status.phase!=Failed" }),
		informers.WithTransform(func(obj any) (any, error) {
			if p, ok := obj.(*corev1.Pod); ok {
				return slimPod(p), nil
			}
			return obj, nil
		}))
	defer factory.Shutdown()
	defer cancel()
	informer := factory.Core().V1().Pods().Informer()
	// An informer retries forever; the plan fails on the first error that leaves it without
	// every pod. One after the initial read (a watch the identity may not open) loses nothing.
	failed := make(chan error, 1)
	if err := informer.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) {
		if r.LastSyncResourceVersion() == "" {
			select {
			case failed <- err:
			default:
			}
		}
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	synced := make(chan bool, 1)
	go func() { synced <- cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) }()
	select {
	case err := <-failed:
		return nil, fmt.Errorf("list pods: %w", err)
	case ok := <-synced:
		if !ok {
			return nil, fmt.Errorf("list pods: %w", context.Cause(ctx))
		}
	}
	// The store's keys are namespace/name, the end of the API server's keys: sorted, the API's order.
	store := informer.GetStore()
	keys := store.ListKeys()
	slices.Sort(keys)
	pods := make([]*corev1.Pod, 0, len(keys))
	for _, key := range keys {
		if obj, ok, _ := store.GetByKey(key); ok {
			pods = append(pods, obj.(*corev1.Pod))
		}
	}
	return pods, nil
}

// readAdmission finds daemonguard's DaemonSet webhooks and compiles the policy set it serves: the
// built-ins with the policy ConfigMaps of its namespace over them.
func (v *clusterView) readAdmission(ctx context.Context, client kubernetes.Interface, policyNS string) error {
	// The Service the webhooks call is in daemonguard's namespace; the validating one's wins.
	var service *admissionregistrationv1.ServiceReference
	mutating, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list mutating webhook configurations: %w", err)
	}
	for i := range mutating.Items {
		if w := lastNamed(mutating.Items[i].Webhooks, admission.MutateDaemonSetWebhook, func(w *admissionregistrationv1.MutatingWebhook) string { return w.Name }); w != nil {
			v.mutating, service = w, w.ClientConfig.Service
		}
	}
	validating, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list validating webhook configurations: %w", err)
	}
	for i := range validating.Items {
		if w := lastNamed(validating.Items[i].Webhooks, admission.ValidateDaemonSetWebhook, func(w *admissionregistrationv1.ValidatingWebhook) string { return w.Name }); w != nil {
			v.validating, service = w, orService(w.ClientConfig.Service, service)
		}
	}
	if v.validating == nil && v.mutating == nil {
		return nil // not installed: no admission
	}
	if policyNS == "" && service != nil {
		policyNS = service.Namespace
	}
	builtin, params, err := policy.Builtin()
	if err != nil {
		return err
	}
	var sources []policy.Source
	if policyNS != "" {
		cms, err := client.CoreV1().ConfigMaps(policyNS).List(ctx, metav1.ListOptions{LabelSelector: admission.PolicyConfigMapLabel + "=true"})
		if err != nil {
			return fmt.Errorf("list policy ConfigMaps in %s: %w", policyNS, err)
		}
		sources = admission.PolicySources(cms.Items)
		v.policySource = fmt.Sprintf("built-in policies and %d policy ConfigMaps of namespace %s", len(cms.Items), policyNS)
	} else {
		v.policySource = "built-in policies only: daemonguard's webhook is registered by URL, so its namespace is unknown; pass --daemonguard-namespace to include its policy ConfigMaps"
	}
	if _, _, v.policies, err = policy.DefaultLimits.CompileOverlay(ctx, builtin, params, sources); err != nil {
		return fmt.Errorf("the cluster's policy set does not compile here (the webhook keeps its last good set): %w", err)
	}
	return nil
}

// lastNamed is the configuration's webhook with the given name, or nil. The API server keeps
// webhook names unique within a configuration (v1), so the last match is the only one.
func lastNamed[W any](webhooks []W, want string, name func(*W) string) *W {
	var found *W
	for i := range webhooks {
		if name(&webhooks[i]) == want {
			found = &webhooks[i]
		}
	}
	return found
}

// orService is a, else b.
func orService(a, b *admissionregistrationv1.ServiceReference) *admissionregistrationv1.ServiceReference {
	if a != nil {
		return a
	}
	return b
}

// namespaceLabels reads (once) a namespace's labels; a namespace that does not exist yet has none.
func (v *clusterView) namespaceLabels(ctx context.Context, client kubernetes.Interface, name string) (map[string]string, error) {
	if l, ok := v.namespaces[name]; ok {
		return l, nil
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		v.namespaces[name] = map[string]string{corev1.LabelMetadataName: name}
	case err != nil:
		return nil, fmt.Errorf("get namespace %s: %w", name, err)
	default:
		v.namespaces[name] = ns.Labels
	}
	return v.namespaces[name], nil
}

// ownedBy is the pods whose controller is uid.
func ownedBy(pods []*corev1.Pod, uid types.UID) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if ref := metav1.GetControllerOf(p); ref != nil && ref.UID == uid {
			out = append(out, p)
		}
	}
	return out
}

// ContextOutcome is what one kube context's work returned.
type ContextOutcome[T any] struct {
	Context string
	Value   T
	Err     error
}

// EachContext runs work once for every context of f and returns the outcomes in f's order.
//
// Assumptions: work reaches only its own cluster, and returns when its ctx ends.
// Invariants: at most f.Parallel calls of work run at once; each gets its own ctx, ended
// f.ClusterTimeout after it starts, so one cluster that does not answer costs its row and one
// slot for that long, never the fleet; a failure of one context is its outcome's Err and does not
// stop the others. When the caller's ctx ends, the contexts not yet started are not started and
// their Err says why.
func EachContext[T any](ctx context.Context, f Fleet, work func(ctx context.Context, kubeContext string) (T, error)) []ContextOutcome[T] {
	out := make([]ContextOutcome[T], len(f.Contexts))
	slots := make(chan struct{}, max(f.Parallel, 1))
	var wg sync.WaitGroup
	for i, name := range f.Contexts {
		out[i].Context = name
		acquired := false
		select {
		case slots <- struct{}{}:
			acquired = true
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			// A free slot and the end can be ready at once; the end wins.
			if acquired {
				<-slots
			}
			out[i].Err = fmt.Errorf("context %s: not started: %w", name, context.Cause(ctx))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			timeout := fmt.Errorf("no answer within %s (--cluster-timeout)", f.ClusterTimeout)
			cctx, cancel := context.WithTimeoutCause(ctx, f.ClusterTimeout, timeout)
			defer cancel()
			out[i].Value, out[i].Err = work(cctx, name)
			if out[i].Err != nil && errors.Is(context.Cause(cctx), timeout) {
				out[i].Err = fmt.Errorf("%w: %w", timeout, out[i].Err)
			}
		}()
	}
	wg.Wait()
	return out
}
