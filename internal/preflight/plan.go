package preflight

// This file is the run of `daemonguard rollout plan`, from the command's flags (NewPlanCommand):
// it gathers what the cluster runs (nodes, pods, pod disruption budgets, priority classes,
// daemonguard's webhooks and policy ConfigMaps, the live DaemonSet), merges the manifest into the
// live object as kubectl apply does, runs admission as the cluster would, assesses the stored
// object (Assess), and runs its analysis gates' queries once in Prometheus (checkAnalysis). It
// only reads.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/exitcode"
	"github.com/daemonguard/daemonguard/internal/manifest"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/promscope"
	"github.com/daemonguard/daemonguard/webhook"
)

// The exit statuses of `rollout plan`, apart so CI can tell them: a denial is worse than a pod
// that will not fit, which is worse than an analysis gate that would not pass today, which is
// worse than fine. 1 is any error (the plan could not be made).
const (
	exitPlanDenied = 2
	exitPlanNotFit = 3
	exitPlanGates  = 4
)

// severity orders the exit statuses of findings, the least serious first.
var severity = []int{0, exitPlanGates, exitPlanNotFit, exitPlanDenied}

// gatesNotRun says why the analysis check did not run without a Prometheus, and how to run it.
const gatesNotRun = "no --prometheus-address: pass the controller's (with --prometheus-ca-file and --prometheus-bearer-token-file as it has them) to run each gate's query once against the revision the pods run today"

// lastAppliedAnnotation is kubectl's record of the last client-side apply, the "original" of its
// three-way merge.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// NewPlanCommand is `daemonguard rollout plan`: the flags, the manifests read, the cluster
// reached through connect (the client and the default namespace of the kubeconfig), then the
// plan made and rendered, and the exit status says the most serious outcome. It lives with the
// run it starts, so that a reader follows a plan from its flags to its report in one package.
func NewPlanCommand(connect func() (kubernetes.Interface, string, error)) *cobra.Command {
	var files []string
	var output, policyNamespace string
	var prometheus promquery.Options
	cmd := &cobra.Command{
		Use:   "plan -f FILE|DIR|- [-f ...]",
		Short: "Show what applying DaemonSet manifests would do, node by node, before they are applied",
		Long: `plan reads the target cluster (it never writes) and tells, for every DaemonSet in the manifests:

  - admission as the cluster runs it: the object after daemonguard's injection (webhook or
    in-process policy), the warnings or the denial, a diff against the live object, and whether
    the pod template changes at all (no new revision: no pod is touched);
  - every node: its pod today, and whether it gains, loses, replaces or keeps it, and why; where the
    new pod will not fit or collides on a host port, and which lower-priority pods it preempts;
  - the rollout: daemonguard's waves and pauses for managed DaemonSets, the built-in strategy's
    otherwise, with an estimate from how long this DaemonSet's pods took to become ready.

The manifest is merged into the live DaemonSet as kubectl apply does (three-way, with the
last-applied annotation).

A managed DaemonSet's analysis gates (daemonguard.io/analysis) are listed; with --prometheus-address
each gate's query is run once against the revision the DaemonSet's pods run today, over every node
that runs it, and the plan names the nodes without a series and those already out of bounds: what
would hold or halt the rollout whatever the new revision does.

Exit status: 0 fine, 2 some DaemonSet would be denied, 3 some new pod would not fit or would preempt
other pods, 4 some analysis gate would not pass today (a node out of bounds or without a series,
Prometheus not answering), 1 the plan could not be made.

  helm template my-release ./chart | daemonguard rollout plan -f - -o markdown`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" && output != "markdown" {
				return fmt.Errorf("--output %q is not one of table, json, markdown", output)
			}
			prom, err := promquery.New(prometheus)
			if err != nil {
				return err
			}
			if err := manifest.RequirePaths(files); err != nil {
				return err
			}
			docs, err := manifest.Read(files, cmd.InOrStdin())
			if err != nil {
				return err
			}
			client, ns, err := connect()
			if err != nil {
				return err
			}
			reports, err := PlanManifests(cmd.Context(), client, prom, ns, policyNamespace, docs, time.Now())
			if err != nil {
				return err
			}
			if err := Render(cmd.OutOrStdout(), output, reports); err != nil {
				return err
			}
			if code := ExitStatus(reports); code != 0 {
				return exitcode.Error{Code: code}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file, directory or - for stdin (repeatable); kinds other than DaemonSet are skipped")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table, json or markdown")
	cmd.Flags().StringVar(&policyNamespace, "daemonguard-namespace", "", "namespace of daemonguard's policy ConfigMaps (default: the namespace of the service its validating webhook calls)")
	// The controller's flags, with the same names and meaning, so that a plan reaches the
	// Prometheus the controller measures with.
	cmd.Flags().StringVar(&prometheus.Address, "prometheus-address", "", "base URL of the Prometheus the controller measures analysis gates with, e.g. https://prometheus.monitoring:9090; without it the gates' queries are not run")
	cmd.Flags().StringVar(&prometheus.CAFile, "prometheus-ca-file", "", "CA certificate file that verifies Prometheus' serving certificate (default: the system's roots)")
	cmd.Flags().StringVar(&prometheus.BearerTokenFile, "prometheus-bearer-token-file", "", "file of the bearer token sent to Prometheus")
	cmd.Flags().DurationVar(&prometheus.Timeout, "prometheus-timeout", promquery.DefaultTimeout, "deadline of each gate's query")
	cmd.Flags().StringVar(&prometheus.NamespaceLabel, "prometheus-namespace-label", promscope.DefaultLabel, "series label naming the namespace: outside namespaces marked for node agents a gate's query reads only series with this label set to its DaemonSet's namespace, as in the controller")
	return cmd
}

// Report is one DaemonSet's pre-flight: admission, then the plan when admitted.
type Report struct {
	Source    string          `json:"source"`
	Namespace string          `json:"namespace"`
	Name      string          `json:"name"`
	Admission AdmissionReport `json:"admission"`
	// Plan is nil when the object would be denied or could not be evaluated.
	Plan *Impact `json:"plan,omitempty"`
	// Error is why the DaemonSet could not be planned (malformed manifest, policy error).
	Error string `json:"error,omitempty"`
}

// AdmissionReport is what admission would do to the write.
type AdmissionReport struct {
	// Injection is "webhook", "in-process" (a MutatingAdmissionPolicy generated from the
	// policies), "not called" (the webhook's selectors exclude the object) or "none" (daemonguard is
	// not installed).
	Injection string `json:"injection"`
	// Validation is "webhook", "not called" or "none".
	Validation string             `json:"validation"`
	Skip       string             `json:"skip,omitempty"` // why admission leaves the write alone
	Mutated    bool               `json:"mutated"`
	Allowed    bool               `json:"allowed"`
	Violations []policy.Violation `json:"violations"`
	// Diff is a unified diff of the live object (or the manifest, on create) against the object
	// as it would be stored; empty when they are the same.
	Diff string `json:"diff,omitempty"`
	// Policies says which policy set judged the object: the built-ins, with the policy
	// ConfigMaps of daemonguard's namespace when it is known.
	Policies string `json:"policies,omitempty"`
}

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

// PlanManifests plans every DaemonSet of docs against the cluster: admission, then, when admitted,
// the assessment of the object as it would be stored, and the check of its analysis gates
// against prom (nil, or without an address: not run). defaultNS is the namespace of documents
// without one; policyNS that of daemonguard's policy ConfigMaps, found from its webhooks when "".
func PlanManifests(ctx context.Context, client kubernetes.Interface, prom *promquery.Client, defaultNS, policyNS string, docs []manifest.Document, now time.Time) ([]Report, error) {
	var daemonSets []manifest.Document
	for _, d := range docs {
		if manifest.IsDaemonSet(d) {
			daemonSets = append(daemonSets, d)
		}
	}
	if len(daemonSets) == 0 {
		return []Report{}, nil
	}
	view, err := readCluster(ctx, client, policyNS)
	if err != nil {
		return nil, err
	}
	reports := make([]Report, 0, len(daemonSets))
	for _, d := range daemonSets {
		ns := d.Namespace
		if ns == "" {
			ns = defaultNS
		}
		rep, err := planDocument(ctx, client, prom, view, d, ns, now)
		if err != nil {
			return nil, err
		}
		reports = append(reports, rep)
	}
	return reports, nil
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
		if w := lastNamed(mutating.Items[i].Webhooks, webhook.MutateDaemonSetWebhook, func(w *admissionregistrationv1.MutatingWebhook) string { return w.Name }); w != nil {
			v.mutating, service = w, w.ClientConfig.Service
		}
	}
	validating, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list validating webhook configurations: %w", err)
	}
	for i := range validating.Items {
		if w := lastNamed(validating.Items[i].Webhooks, webhook.ValidateDaemonSetWebhook, func(w *admissionregistrationv1.ValidatingWebhook) string { return w.Name }); w != nil {
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

// planDocument plans one DaemonSet manifest.
func planDocument(ctx context.Context, client kubernetes.Interface, prom *promquery.Client, v *clusterView, d manifest.Document, ns string, now time.Time) (Report, error) {
	rep := Report{Source: d.Source, Namespace: ns, Name: d.Name, Admission: AdmissionReport{Injection: "none", Validation: "none", Allowed: true, Violations: []policy.Violation{}, Policies: v.policySource}}
	raw, err := withNamespace(d.Raw, ns)
	if err != nil {
		rep.Error = err.Error()
		return rep, nil
	}
	live, err := client.AppsV1().DaemonSets(ns).Get(ctx, d.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return rep, fmt.Errorf("get daemonset %s/%s: %w", ns, d.Name, err)
	default:
		// The typed client drops the kind; the API server's review, the merge and the diff all
		// see the object whole.
		live.TypeMeta = metav1.TypeMeta{APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "DaemonSet"}
	}
	review := admission.Review{Operation: policy.OpCreate, Namespace: ns, Object: raw}
	before := raw
	if live != nil {
		current, err := json.Marshal(live)
		if err != nil {
			return rep, err
		}
		merged, err := applyMerge(live, current, raw)
		if err != nil {
			rep.Error = err.Error()
			return rep, nil
		}
		review = admission.Review{Operation: policy.OpUpdate, Namespace: ns, Object: merged, OldObject: current}
		before = current
	}
	nsLabels, err := v.namespaceLabels(ctx, client, ns)
	if err != nil {
		return rep, err
	}
	stored, err := v.admit(ctx, &rep.Admission, review, nsLabels)
	if err != nil {
		rep.Error = err.Error()
		return rep, nil
	}
	if !rep.Admission.Allowed {
		return rep, nil
	}
	if rep.Admission.Diff, err = unifiedDiff(before, stored, "live", "after apply"); err != nil {
		return rep, err
	}
	var after appsv1.DaemonSet
	if err := json.Unmarshal(stored, &after); err != nil {
		rep.Error = fmt.Sprintf("decode DaemonSet: %v", err)
		return rep, nil
	}
	in := Snapshot{After: &after, Live: live, Nodes: v.nodes, Pods: v.pods, Budgets: v.budgets, Now: now}
	if live != nil {
		in.NewRevision = !apiequality.Semantic.DeepEqual(live.Spec.Template, after.Spec.Template)
		in.DaemonPods = ownedBy(v.pods, live.UID)
		in.ReadyAfter, in.ReadyKnown = ReadyAfter(in.DaemonPods)
	}
	class := after.Spec.Template.Spec.PriorityClassName
	if class == "" {
		class = v.defaultPriority
	}
	if class != "" {
		value, ok := v.priorityClasses[class]
		if !ok {
			in.Problems = append(in.Problems, fmt.Sprintf("priorityClassName %q does not exist: the API server rejects every new pod", class))
		}
		in.Priority = value
		if v.preemptNever[class] {
			in.PreemptionPolicy = corev1.PreemptNever
		}
	}
	if p := after.Spec.Template.Spec.PreemptionPolicy; p != nil {
		in.PreemptionPolicy = *p
	}
	impact := Assess(in)
	impact.Analysis = checkAnalysis(ctx, prom, &after, impact.Nodes, prom.Scope(ns, admission.NodeAgentsNamespace(nsLabels)))
	rep.Plan = &impact
	return rep, nil
}

// checkAnalysis runs each analysis gate's query of the stored DaemonSet once, through the
// controller's Prometheus client, kept to scope as the controller keeps it (outside namespaces
// marked for node agents, to the DaemonSet's namespace's series), against the revision its pods
// run today (analysisCheck), and judges the answers (judgeGates). Without a Prometheus address
// nothing is run, and the check says how to run it. Prometheus not answering is the gate's
// result, never an error of the plan.
func checkAnalysis(ctx context.Context, prom *promquery.Client, ds *appsv1.DaemonSet, nodes []NodeImpact, scope promscope.Scope) *AnalysisCheck {
	c, run := analysisCheck(ds, nodes)
	if run == nil {
		return c
	}
	// The plan shows each query as Prometheus is asked it; one that cannot be scoped is shown as
	// written, and its measurement says why it was not run.
	for i, q := range run.req.Queries {
		if scoped, err := scope.Apply(q.Wave); err == nil {
			run.req.Queries[i].Wave, c.Gates[i].Query = scoped, scoped
		}
	}
	if prom == nil || prom.Address() == "" {
		c.NotRun = gatesNotRun
		return c
	}
	c.Ran, c.Prometheus = true, prom.Address()
	c.Gates = judgeGates(*run, prom.Measure(ctx, run.req, scope))
	return c
}

// applyMerge is what kubectl apply stores: the three-way strategic merge of the last applied
// configuration, the manifest and the live object. A field removed from the manifest is removed
// only when the last apply set it; with server-side apply (no annotation) removals are not seen.
func applyMerge(live *appsv1.DaemonSet, current, manifest []byte) ([]byte, error) {
	meta, err := strategicpatch.NewPatchMetaFromStruct(appsv1.DaemonSet{})
	if err != nil {
		return nil, err
	}
	original := []byte(live.Annotations[lastAppliedAnnotation])
	patch, err := strategicpatch.CreateThreeWayMergePatch(original, manifest, current, meta, true)
	if err != nil {
		return nil, fmt.Errorf("merge the manifest into the live DaemonSet: %w", err)
	}
	merged, err := strategicpatch.StrategicMergePatchUsingLookupPatchMeta(current, patch, meta)
	if err != nil {
		return nil, fmt.Errorf("merge the manifest into the live DaemonSet: %w", err)
	}
	return merged, nil
}

// admit runs daemonguard's admission on the review as the API server would call it, and returns
// the object as it would be stored.
func (v *clusterView) admit(ctx context.Context, rep *AdmissionReport, rv admission.Review, nsLabels map[string]string) ([]byte, error) {
	obj, err := objectLabels(rv.Object)
	if err != nil {
		return nil, err
	}
	old, _ := objectLabels(rv.OldObject)
	// The API server calls a webhook when its namespace selector matches and its object
	// selector matches the object, or on an update the old object.
	calls := func(nsSel, objSel *metav1.LabelSelector) bool {
		return selects(nsSel, nsLabels) && (selects(objSel, obj) || (rv.OldObject != nil && selects(objSel, old)))
	}
	mutate := v.mutating != nil && calls(v.mutating.NamespaceSelector, v.mutating.ObjectSelector)
	validate := v.validating != nil && calls(v.validating.NamespaceSelector, v.validating.ObjectSelector)
	switch {
	case v.mutating != nil && mutate:
		rep.Injection = "webhook"
	case v.mutating != nil:
		rep.Injection = "not called"
	case v.validating != nil && validate:
		// Installed without the DaemonSet mutating webhook: a MutatingAdmissionPolicy generated
		// from the same policies injects (daemonguard policy export), within the same selectors.
		rep.Injection, mutate = "in-process", true
	case v.validating != nil:
		rep.Injection = "not called"
	}
	switch {
	case v.validating != nil && validate:
		rep.Validation = "webhook"
	case v.validating != nil:
		rep.Validation = "not called"
	}
	if !mutate && !validate {
		return rv.Object, nil
	}
	a := admission.Reviewer{Lookups: admission.Lookups{
		NamespaceLabels: func(context.Context, string) (map[string]string, error) { return nsLabels, nil },
		Nodes:           func(context.Context) ([]*corev1.Node, error) { return v.nodes, nil },
		PriorityClass:   admission.PriorityClassValues(v.priorityClasses),
	}}
	r := a.Simulate(ctx, v.policies, rv)
	switch {
	case r.Malformed != nil:
		return nil, r.Malformed
	case r.Failed != nil:
		return nil, fmt.Errorf("policy evaluation: %w", r.Failed)
	case r.Skip != "":
		rep.Skip = r.Skip
		return rv.Object, nil
	}
	stored := rv.Object
	if mutate {
		stored, rep.Mutated = r.Mutated, len(r.Patch) > 0
	}
	if validate {
		rep.Allowed = r.Verdict.Allowed
		if r.Violations != nil {
			rep.Violations = r.Violations
		}
	}
	return stored, nil
}

// selects is the API server's label selector match for a webhook's namespace or object selector:
// nil or empty selects everything.
func selects(sel *metav1.LabelSelector, set map[string]string) bool {
	if sel == nil {
		return true
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(set))
}

func objectLabels(raw []byte) (map[string]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var head struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	return head.Metadata.Labels, nil
}

// withNamespace sets metadata.namespace, as the API server does for a manifest without one.
func withNamespace(raw []byte, ns string) ([]byte, error) {
	var obj map[string]any
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	meta["namespace"] = ns
	return json.Marshal(obj)
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

// ExitStatus is the most serious outcome of the reports, as the command's exit status: 1 when
// some DaemonSet could not be planned, 2 when one would be denied, 3 when a new pod would not
// fit, collide or preempt, 4 when an analysis gate would not pass today, else 0.
func ExitStatus(reports []Report) int {
	code := 0
	worse := func(c int) {
		if slices.Index(severity, c) > slices.Index(severity, code) {
			code = c
		}
	}
	for _, r := range reports {
		switch {
		case r.Error != "":
			return 1
		case !r.Admission.Allowed:
			worse(exitPlanDenied)
		case r.Plan == nil:
		case r.Plan.Summary.NotFit > 0 || r.Plan.Summary.Preempting > 0 || len(r.Plan.Problems) > 0:
			worse(exitPlanNotFit)
		case r.Plan.Analysis.finding():
			worse(exitPlanGates)
		}
	}
	return code
}
