package preflight

// This file is the run of `daemonguard rollout plan`, from the command's flags (NewPlanCommand) to
// its exit status (ExitStatus): it gathers the cluster once (gather.go), and for every DaemonSet
// of the manifests reads the live object, merges the manifest into it and runs admission as the
// cluster would (admission.go), assesses the object as it would be stored (Assess), and checks
// its analysis gates once in Prometheus (analysis.go). It only reads.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/exitcode"
	"github.com/daemonguard/daemonguard/internal/manifest"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
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

// NewPlanCommand is `daemonguard rollout plan`: the flags, the manifests read, the cluster
// reached through connect (the client and the default namespace of the kubeconfig), then the
// plan made and rendered, and the exit status says the most serious outcome. It lives with the
// run it starts, so that a reader follows a plan from its flags to its report in one package.
//
// With WithContexts the command also plans over several kube contexts at once (--contexts): see
// Fleet and PlanFleet.
func NewPlanCommand(connect func() (kubernetes.Interface, string, error), opts ...PlanOption) *cobra.Command {
	var files []string
	var output, policyNamespace string
	var prometheus promquery.Options
	var o planOptions
	for _, opt := range opts {
		opt(&o)
	}
	var fleet Fleet
	var prometheusOf map[string]string // --prometheus-addresses: the Prometheus of each context
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

With --contexts a,b,c the manifests are planned in every context, --parallel clusters at once,
each within --cluster-timeout, and the report opens with one summary row per cluster and
DaemonSet (nodes that gain, lose or are replaced, where the new pod does not fit or preempts,
the policies that deny, the gates that would fail today), then the whole plan of each cluster
with a finding. A cluster that cannot be read is a row with its error. The exit status is the
most serious cluster's, 1 when one could not be planned. Each cluster's gates are checked against
its own Prometheus, named with --prometheus-addresses CONTEXT=URL (--prometheus-address is one
cluster's); a context without one has its gates listed, not run.

  helm template my-release ./chart | daemonguard rollout plan -f - -o markdown
  helm template my-release ./chart | daemonguard rollout plan -f - -o markdown --contexts canary,prod-eu,prod-us`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" && output != "markdown" {
				return fmt.Errorf("--output %q is not one of table, json, markdown", output)
			}
			if err := fleet.Validate(cmd.Flags()); err != nil {
				return err
			}
			var prom *promquery.Client
			var proms map[string]*promquery.Client
			var err error
			if fleet.On() {
				proms, err = fleetPrometheus(prometheus, fleet.Contexts, prometheusOf)
			} else if len(prometheusOf) > 0 {
				err = fmt.Errorf("--prometheus-addresses names the Prometheus of each context of --contexts; for one cluster use --prometheus-address")
			} else {
				prom, err = promquery.New(prometheus)
			}
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
			if fleet.On() {
				plans := PlanFleet(cmd.Context(), fleet, func(ctx context.Context, kubeContext string) ([]Report, error) {
					client, ns, err := o.connectTo(kubeContext)
					if err != nil {
						return nil, err
					}
					reports, err := PlanManifests(ctx, client, proms[kubeContext], ns, policyNamespace, docs, time.Now())
					notRunInFleet(reports, kubeContext)
					return reports, err
				})
				if err := RenderFleet(cmd.OutOrStdout(), output, plans); err != nil {
					return err
				}
				if code := FleetExitStatus(plans); code != 0 {
					return exitcode.Error{Code: code}
				}
				return nil
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
	cmd.Flags().StringVar(&prometheus.NamespaceLabel, "prometheus-namespace-label", rolloutanalysis.DefaultNamespaceLabel, "series label naming the namespace: outside namespaces marked for node agents a gate's query reads only series with this label set to its DaemonSet's namespace, as in the controller")
	if o.connectTo != nil {
		fleet.AddFlags(cmd.Flags(), defaultPlanClusterTimeout)
		cmd.Flags().StringToStringVar(&prometheusOf, "prometheus-addresses", nil, "with --contexts: CONTEXT=URL of each cluster's Prometheus (comma-separated, repeatable), with the other --prometheus-* flags; a context without one has its gates listed, not run")
	}
	return cmd
}

// notRunInFleet rewords why a cluster's gates were not run, for a fleet plan: there the flag that
// runs them is --prometheus-addresses, not --prometheus-address (refused with --contexts).
func notRunInFleet(reports []Report, kubeContext string) {
	for _, r := range reports {
		if r.Plan != nil && r.Plan.Analysis != nil && r.Plan.Analysis.NotRun == gatesNotRun {
			r.Plan.Analysis.NotRun = fmt.Sprintf("no --prometheus-addresses %s=URL: name the Prometheus this cluster's controller measures with to run each gate's query once against the revision the pods run today", kubeContext)
		}
	}
}

// fleetPrometheus makes the Prometheus client of each context of a fleet plan: each cluster's
// controller measures with its own Prometheus, so --prometheus-addresses names one per context,
// with the other flags of opts; a context without one gets a client without an address (the
// gates listed, not run). opts.Address, one Prometheus for every cluster, is refused: it does not
// answer for the nodes of several clusters (node names repeat across clusters, its series carry no
// cluster the query selects).
func fleetPrometheus(opts promquery.Options, contexts []string, addresses map[string]string) (map[string]*promquery.Client, error) {
	if opts.Address != "" {
		return nil, fmt.Errorf("--prometheus-address with --contexts: one Prometheus does not answer for the nodes of several clusters; name each context's with --prometheus-addresses CONTEXT=URL")
	}
	for name := range addresses {
		if !slices.Contains(contexts, name) {
			return nil, fmt.Errorf("--prometheus-addresses names context %q, which --contexts does not", name)
		}
	}
	clients := make(map[string]*promquery.Client, len(contexts))
	for _, name := range contexts {
		o := opts
		if o.Address = addresses[name]; o.Address == "" {
			o.CAFile, o.BearerTokenFile = "", ""
		}
		c, err := promquery.New(o)
		if err != nil {
			return nil, fmt.Errorf("the Prometheus of context %s: %w", name, err)
		}
		clients[name] = c
	}
	return clients, nil
}

// defaultPlanClusterTimeout bounds one cluster's plan in a fleet plan. A plan on 1,000 nodes takes
// 0.5 to 2 seconds (docs/performance.md), and a managed DaemonSet's forecast grows with the
// square of the nodes at one node at a time; five minutes leaves room for a large cluster and
// still ends the wait for one that does not answer.
const defaultPlanClusterTimeout = 5 * time.Minute

// PlanOption adds to `rollout plan` what its caller can give.
type PlanOption func(*planOptions)

type planOptions struct {
	connectTo func(kubeContext string) (kubernetes.Interface, string, error)
}

// WithContexts lets the plan run over several kube contexts (--contexts): connectTo reaches one
// context of the kubeconfig and returns its client and namespace, as the connect of
// NewPlanCommand does for the one context of --context.
func WithContexts(connectTo func(kubeContext string) (kubernetes.Interface, string, error)) PlanOption {
	return func(o *planOptions) { o.connectTo = connectTo }
}

// Fleet holds the flags of a verb run over several kube contexts at once: `rollout plan` and
// `rollout status`.
//
// The contexts are one flag, --contexts a,b,c (comma-separated, repeatable), rather than a
// repeatable --context: --context is kubectl's, a persistent flag of every rollout verb that
// names one context, and undo, pause or restart over a fleet at once is not something to do by
// a typo. Only the verbs that read take --contexts; the caller makes it exclusive with --context.
type Fleet struct {
	// Contexts are the kube contexts, in the order the report lists them; none means one cluster,
	// the verb as without --contexts.
	Contexts []string
	// Parallel bounds the clusters read at once: each plan holds every pod of its cluster.
	Parallel int
	// ClusterTimeout bounds one cluster's work; a cluster past it is a row with the error.
	ClusterTimeout time.Duration
}

// AddFlags registers --contexts, --parallel and --cluster-timeout (whose default is timeout).
func (f *Fleet) AddFlags(fs *pflag.FlagSet, timeout time.Duration) {
	fs.StringSliceVar(&f.Contexts, "contexts", nil, "kube contexts to report on at once, comma-separated or repeated (e.g. --contexts canary,prod-eu,prod-us); one row per cluster; a cluster that cannot be read is a row with its error")
	fs.IntVar(&f.Parallel, "parallel", 4, "with --contexts: at most this many clusters read at once")
	fs.DurationVar(&f.ClusterTimeout, "cluster-timeout", timeout, "with --contexts: give up on a cluster after this long (its row says so)")
}

// maxFleetContexts bounds --contexts: a fleet summary past it is no summary, and a mistaken glob
// in a script should not open thousands of connections.
const maxFleetContexts = 1000

// Validate checks the fleet flags of fs: with --contexts, names given, none twice, a positive
// bound and timeout.
func (f *Fleet) Validate(fs *pflag.FlagSet) error {
	switch {
	case fs.Changed("contexts") && len(f.Contexts) == 0:
		return fmt.Errorf("--contexts names no context")
	case !f.On():
		return nil // one cluster: --parallel and --cluster-timeout do not apply
	}
	if len(f.Contexts) > maxFleetContexts {
		return fmt.Errorf("--contexts names %d contexts, more than %d", len(f.Contexts), maxFleetContexts)
	}
	seen := map[string]bool{}
	for _, c := range f.Contexts {
		switch {
		case c == "":
			return fmt.Errorf("--contexts has an empty context name")
		case seen[c]:
			return fmt.Errorf("--contexts names context %q twice", c)
		}
		seen[c] = true
	}
	if f.Parallel < 1 {
		return fmt.Errorf("--parallel %d: must be at least 1", f.Parallel)
	}
	if f.ClusterTimeout <= 0 {
		return fmt.Errorf("--cluster-timeout %s: must be positive", f.ClusterTimeout)
	}
	return nil
}

// On says whether the verb runs over the contexts of --contexts.
func (f *Fleet) On() bool { return len(f.Contexts) > 0 }

// ClusterPlan is one kube context's plan in a fleet plan: its reports, or why there are none.
type ClusterPlan struct {
	Context string   `json:"context"`
	Items   []Report `json:"items"`
	// Error is why the cluster could not be planned: unreachable, forbidden, past
	// --cluster-timeout. Items is then empty.
	Error string `json:"error,omitempty"`
	// ExitCode is the cluster's own exit status, as `rollout plan --context` alone would exit.
	ExitCode int `json:"exitCode"`
}

// PlanFleet plans every context of f with plan (which reaches the context and plans the
// manifests in it), through EachContext, and returns one ClusterPlan per context in f's order.
func PlanFleet(ctx context.Context, f Fleet, plan func(ctx context.Context, kubeContext string) ([]Report, error)) []ClusterPlan {
	outcomes := EachContext(ctx, f, plan)
	plans := make([]ClusterPlan, len(outcomes))
	for i, o := range outcomes {
		plans[i] = ClusterPlan{Context: o.Context, Items: o.Value, ExitCode: ExitStatus(o.Value)}
		if plans[i].Items == nil {
			plans[i].Items = []Report{}
		}
		if o.Err != nil {
			plans[i].Error, plans[i].ExitCode = o.Err.Error(), 1
		}
	}
	return plans
}

// FleetExitStatus is a fleet plan's exit status: the most serious of its clusters', in
// ExitStatus's order, where a cluster that could not be planned (1) outranks every finding.
func FleetExitStatus(plans []ClusterPlan) int {
	code := 0
	for _, p := range plans {
		if p.ExitCode == 1 {
			return 1
		}
		code = worse(code, p.ExitCode)
	}
	return code
}

// worse is the more serious of two finding exit statuses (severity's order).
func worse(code, c int) int {
	if slices.Index(severity, c) > slices.Index(severity, code) {
		return c
	}
	return code
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

// ExitStatus is the most serious outcome of the reports, as the command's exit status: 1 when
// some DaemonSet could not be planned, 2 when one would be denied, 3 when a new pod would not
// fit, collide or preempt, 4 when an analysis gate would not pass today, else 0.
func ExitStatus(reports []Report) int {
	code := 0
	for _, r := range reports {
		switch {
		case r.Error != "":
			return 1
		case !r.Admission.Allowed:
			code = worse(code, exitPlanDenied)
		case r.Plan == nil:
		case r.Plan.Summary.NotFit > 0 || r.Plan.Summary.Preempting > 0 || len(r.Plan.Problems) > 0:
			code = worse(code, exitPlanNotFit)
		case r.Plan.Analysis.finding():
			code = worse(code, exitPlanGates)
		}
	}
	return code
}
