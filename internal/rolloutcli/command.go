// Package rolloutcli is `daemonguard rollout`, every verb of it: reading a DaemonSet's rollout
// state (from daemonguard's rollout controller for managed DaemonSets, from the built-in DaemonSet
// controller's status otherwise), following it, and the kubectl-compatible history, undo,
// restart, pause and resume operations. Evaluating, rendering and choosing are pure functions;
// the few functions taking a client only fetch and patch.
//
// command.go is the cobra command tree (NewCommand) and the kubectl-style connection flags;
// ref.go parses the DaemonSet argument; status.go evaluates a rollout's state, watch.go watches
// it, follow.go follows it to the end and progress.go draws it; history.go reads revisions and
// chooses what undo restores; ops.go pauses, resumes and restarts; fleet.go is status over
// several kube contexts (--contexts). `rollout plan` is internal/preflight's command
// (NewPlanCommand), which NewCommand adds beside the other verbs.
package rolloutcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"golang.org/x/term"

	"github.com/daemonguard/daemonguard/internal/exitcode"
	"github.com/daemonguard/daemonguard/internal/kubetext"
	"github.com/daemonguard/daemonguard/internal/preflight"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// kubeFlags are the kubectl-style connection flags shared by the rollout subcommands.
type kubeFlags struct {
	kubeconfig, context, namespace string
}

// connect returns a client and the namespace of --context: see connectTo.
func (k *kubeFlags) connect() (kubernetes.Interface, string, error) {
	return k.connectTo(k.context)
}

// connectTo returns a client of the kubeconfig's context kubeContext ("" is the current context)
// and the namespace: --namespace, else the context's namespace, else "default" (the service
// account's namespace in a pod).
func (k *kubeFlags) connectTo(kubeContext string) (kubernetes.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	overrides.Context.Namespace = k.namespace
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("load kubeconfig: %w", err)
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("namespace from kubeconfig: %w", err)
	}
	// Protobuf, as the control plane's own clients talk: a plan reads every pod of the cluster,
	// which decodes several times faster, with less garbage, than as JSON. The typed client speaks
	// built-in types only, which all have it.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if cfg.QPS == 0 {
		// client-go's default of 5 requests per second, burst 10, would hold a plan that pages
		// through 150,000 pods for a minute; the API server's priority and fairness protects it.
		cfg.QPS, cfg.Burst = 50, 100
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("create client: %w", err)
	}
	return c, ns, nil
}

// daemonSet parses the arguments and fetches the DaemonSet.
func (k *kubeFlags) daemonSet(ctx context.Context, args []string) (kubernetes.Interface, *appsv1.DaemonSet, error) {
	name, err := ParseArgs(args)
	if err != nil {
		return nil, nil, err
	}
	c, ns, err := k.connect()
	if err != nil {
		return nil, nil, err
	}
	ds, err := c.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	return c, ds, nil
}

// NewCommand is `daemonguard rollout` with its verbs: status, history, undo, pause, resume,
// restart and plan. internal/cli adds it to the root command.
func NewCommand() *cobra.Command {
	k := &kubeFlags{}
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Follow, pause, resume, undo and restart DaemonSet rollouts (kubectl rollout for DaemonSets, daemonguard-aware)",
		Long: `rollout works like kubectl rollout on DaemonSets, given as ds/NAME, daemonset/NAME or NAME.

DaemonSets with updateStrategy OnDelete and the annotation daemonguard.io/rollout: managed are rolled
out by daemonguard's rollout controller: status follows its steps and conditions, and pause/resume
drive it through annotations. Other DaemonSets are rolled out by the built-in DaemonSet controller
and behave as with kubectl.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig path (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	pf.StringVar(&k.context, "context", "", "kubeconfig context to use (default: the current context)")
	pf.StringVarP(&k.namespace, "namespace", "n", "", "namespace of the DaemonSet (default: the context's namespace)")
	status, plan := newStatusCommand(k), preflight.NewPlanCommand(k.connect, preflight.WithContexts(k.connectTo))
	cmd.AddCommand(
		status,
		newHistoryCommand(k),
		newUndoCommand(k),
		newPauseCommand(k),
		newResumeCommand(k),
		newRestartCommand(k),
		plan,
	)
	// The verbs that read take --contexts (preflight.Fleet says why not a repeatable --context);
	// it names the clusters that --context would name one of.
	for _, c := range []*cobra.Command{status, plan} {
		c.MarkFlagsMutuallyExclusive("context", "contexts")
	}
	return cmd
}

func newStatusCommand(k *kubeFlags) *cobra.Command {
	var watch bool
	var timeout time.Duration
	var fleet preflight.Fleet
	cmd := &cobra.Command{
		Use:   "status ds/NAME",
		Short: "Follow a DaemonSet's rollout until it completes (exit 0), fails or times out (exit 1)",
		Long: `status follows the rollout of a DaemonSet until it completes or fails.

Managed DaemonSets report the rollout controller's step, progress and next nodes; a Failed condition
ends the command with exit code 1, a pause is shown and waited out. Other RollingUpdate DaemonSets
are followed as kubectl rollout status does. An unmanaged OnDelete DaemonSet is not rolled out by
anyone: status says so and exits 0.

On a terminal a single progress line is redrawn in place; otherwise a line is printed whenever the
status changes.

With --contexts a,b,c status reads the DaemonSet in every context once and prints one line per
cluster: its current revision, phase, updated/desired nodes, step and message; a cluster that
cannot be read is a line with its error. Exit status: 0 every cluster complete (or not rolled out
by anyone), 1 some rollout failed or some cluster could not be read, 2 otherwise (some rollout is
still progressing, paused or waiting): run it again to wait.`,
		Example: `  daemonguard rollout status ds/node-agent -n monitoring
  daemonguard rollout status ds/node-agent --timeout=10m
  daemonguard rollout status node-agent --watch=false
  daemonguard rollout status ds/node-agent -n monitoring --contexts canary,prod-eu,prod-us`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := ParseArgs(args)
			if err != nil {
				return err
			}
			if timeout < 0 {
				return fmt.Errorf("--timeout must not be negative")
			}
			if err := fleet.Validate(cmd.Flags()); err != nil {
				return err
			}
			if fleet.On() {
				if watch && cmd.Flags().Changed("watch") || cmd.Flags().Changed("timeout") {
					return fmt.Errorf("--contexts reads each cluster's status once: --watch and --timeout do not apply (--cluster-timeout bounds each cluster)")
				}
				rows := FleetStatus(cmd.Context(), fleet, k.connectTo, name)
				if err := RenderFleetStatus(cmd.OutOrStdout(), rows); err != nil {
					return err
				}
				if code := FleetStatusExit(rows); code != 0 {
					return exitcode.Error{Code: code}
				}
				return nil
			}
			c, ns, err := k.connect()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			out := cmd.OutOrStdout()
			tty, width := terminal(out)
			_, err = Follow(ctx, FollowOptions{
				Out: out, Terminal: tty, Width: width, Watch: watch, Timeout: timeout,
			}, Watch(ctx, c, ns, name))
			if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
				return fmt.Errorf("interrupted while following the rollout of daemon set %q", name)
			}
			return err
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", true, "follow the rollout until it ends; false prints the status once")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "give up after this long (e.g. 5m); 0 waits forever")
	fleet.AddFlags(cmd.Flags(), defaultStatusClusterTimeout)
	return cmd
}

// defaultStatusClusterTimeout bounds reading one cluster's DaemonSet and revisions: two requests.
const defaultStatusClusterTimeout = 30 * time.Second

// terminal tells whether out is a terminal, and its width.
func terminal(out io.Writer) (bool, int) {
	f, ok := out.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return false, 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return true, 0
	}
	return true, width
}

func newHistoryCommand(k *kubeFlags) *cobra.Command {
	var revision int64
	cmd := &cobra.Command{
		Use:   "history ds/NAME",
		Short: "List a DaemonSet's revisions (ControllerRevisions), or show one revision's pod template",
		Example: `  daemonguard rollout history ds/node-agent
  daemonguard rollout history ds/node-agent --revision=3`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if revision < 0 {
				return fmt.Errorf("--revision must be a positive revision number")
			}
			c, ds, err := k.daemonSet(cmd.Context(), args)
			if err != nil {
				return err
			}
			revs, err := Revisions(cmd.Context(), c, ds)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if revision == 0 {
				fmt.Fprintf(out, "daemonset.apps/%s\n", ds.Name)
				return PrintHistory(out, revs)
			}
			for _, r := range revs {
				if r.Revision != revision {
					continue
				}
				tmpl, err := rolloutapi.RevisionTemplate(ds, r)
				if err != nil {
					return err
				}
				text, err := TemplateYAML(tmpl)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "daemonset.apps/%s with revision #%d\nPod Template:\n%s", ds.Name, revision, kubetext.Indent(text, "  "))
				return err
			}
			return fmt.Errorf("unable to find revision %d of daemon set %q (see daemonguard rollout history ds/%s)", revision, ds.Name, ds.Name)
		},
	}
	cmd.Flags().Int64Var(&revision, "revision", 0, "show the pod template of this revision")
	return cmd
}

// dryRunFlag adds kubectl's --dry-run[=none|client|server] (bare --dry-run means client).
func dryRunFlag(cmd *cobra.Command, value *string) {
	cmd.Flags().StringVar(value, "dry-run", string(DryRunNone), `"none", "client" (print, send nothing) or "server" (send as a dry run: validated, not persisted)`)
	cmd.Flags().Lookup("dry-run").NoOptDefVal = string(DryRunClient)
}

func parseDryRun(v string) (DryRunMode, error) {
	switch d := DryRunMode(v); d {
	case DryRunNone, DryRunClient, DryRunServer:
		return d, nil
	}
	return "", fmt.Errorf("--dry-run %q is not one of none, client, server", v)
}

func dryRunSuffix(d DryRunMode) string {
	if d == DryRunNone {
		return ""
	}
	return fmt.Sprintf(" (%s dry run)", d)
}

func newUndoCommand(k *kubeFlags) *cobra.Command {
	var toRevision int64
	var dryRun string
	cmd := &cobra.Command{
		Use:   "undo ds/NAME",
		Short: "Restore a previous pod template of a DaemonSet (it becomes a new revision), like kubectl rollout undo",
		Long: `undo patches the DaemonSet with the pod template recorded in one of its ControllerRevisions, as
kubectl rollout undo does: by default the revision before the current one, else --to-revision.
The DaemonSet controller records the restored template as a new, highest revision, and the
DaemonSet's controller (built-in, or daemonguard's for managed DaemonSets) rolls it out.

For a DaemonSet deployed from git (Argo CD, Flux), revert the change in git instead: the next sync
overwrites an undo made in the cluster.`,
		Example: `  daemonguard rollout undo ds/node-agent
  daemonguard rollout undo ds/node-agent --to-revision=2 --dry-run`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := parseDryRun(dryRun)
			if err != nil {
				return err
			}
			if toRevision < 0 {
				return fmt.Errorf("--to-revision must be a positive revision number (0 means the previous revision)")
			}
			c, ds, err := k.daemonSet(cmd.Context(), args)
			if err != nil {
				return err
			}
			warnGitOps(cmd.ErrOrStderr(), ds, "undo", "revert the change in git instead, and let the sync roll it out")
			res, err := Undo(cmd.Context(), c, ds, toRevision, mode)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case res.Skipped:
				_, err = fmt.Fprintf(out, "daemonset.apps/%s skipped rollback (current template already matches revision %d)\n", ds.Name, res.To)
				return err
			case mode == DryRunClient:
				text, err := TemplateYAML(res.Template)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "daemonset.apps/%s will roll back to revision %d (client dry run)\nPod Template:\n%s", ds.Name, res.To, kubetext.Indent(text, "  "))
				return err
			}
			fmt.Fprintf(out, "daemonset.apps/%s rolled back to revision %d%s\n", ds.Name, res.To, dryRunSuffix(mode))
			if mode == DryRunNone {
				noteAfterTemplateChange(cmd.ErrOrStderr(), ds)
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&toRevision, "to-revision", 0, "the revision to restore (default: the one before the current)")
	dryRunFlag(cmd, &dryRun)
	return cmd
}

func newRestartCommand(k *kubeFlags) *cobra.Command {
	var dryRun string
	cmd := &cobra.Command{
		Use:   "restart ds/NAME",
		Short: "Replace every pod of a DaemonSet by changing its pod template, like kubectl rollout restart",
		Long: `restart sets the pod template annotation kubectl.kubernetes.io/restartedAt to now, as kubectl
rollout restart does. The template change is a new revision, rolled out by the DaemonSet's
controller (built-in, or daemonguard's for managed DaemonSets, with its steps and budget).`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			mode, err := parseDryRun(dryRun)
			if err != nil {
				return err
			}
			c, ds, err := k.daemonSet(cmd.Context(), args)
			if err != nil {
				return err
			}
			if err := Restart(cmd.Context(), c, ds, time.Now(), mode); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "daemonset.apps/%s restarted%s\n", ds.Name, dryRunSuffix(mode))
			if mode == DryRunNone {
				noteAfterTemplateChange(cmd.ErrOrStderr(), ds)
			}
			return nil
		},
	}
	dryRunFlag(cmd, &dryRun)
	return cmd
}

func newPauseCommand(k *kubeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "pause ds/NAME",
		Short: "Pause a managed DaemonSet's rollout (annotation daemonguard.io/paused: \"true\")",
		Long: `pause sets the annotation daemonguard.io/paused: "true" on a DaemonSet managed by daemonguard's
rollout controller, which then replaces no further pods until resumed. The built-in DaemonSet
controller cannot pause, so unmanaged DaemonSets are refused.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ds, err := k.daemonSet(cmd.Context(), args)
			if err != nil {
				return err
			}
			res, err := Pause(cmd.Context(), c, ds, DryRunNone)
			if err != nil {
				return err
			}
			if res.Unchanged {
				fmt.Fprintf(cmd.OutOrStdout(), "daemonset.apps/%s already paused\n", ds.Name)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "daemonset.apps/%s paused\n", ds.Name)
			}
			gitOpsHint(cmd.ErrOrStderr(), ds, fmt.Sprintf("%s: \"true\"", rolloutapi.AnnotationPaused))
			return nil
		},
	}
}

func newResumeCommand(k *kubeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "resume ds/NAME",
		Short: "Resume a managed DaemonSet's rollout, also past an indefinite pause step",
		Long: `resume sets daemonguard.io/paused: "false" and a new daemonguard.io/resume token on a DaemonSet
managed by daemonguard's rollout controller: the first undoes pause, the second ends an indefinite
"pause" step of daemonguard.io/steps.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ds, err := k.daemonSet(cmd.Context(), args)
			if err != nil {
				return err
			}
			res, err := Resume(cmd.Context(), c, ds, time.Now(), DryRunNone)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "daemonset.apps/%s resumed (%s: %s)\n", ds.Name, rolloutapi.AnnotationResume, res.Token)
			gitOpsHint(cmd.ErrOrStderr(), ds, fmt.Sprintf("%s: \"false\" and a new %s value", rolloutapi.AnnotationPaused, rolloutapi.AnnotationResume))
			return nil
		},
	}
}

// warnGitOps warns that an in-cluster change to a DaemonSet synced from git does not last.
func warnGitOps(w io.Writer, ds *appsv1.DaemonSet, verb, instead string) {
	if g, ok := DetectGitOps(ds); ok {
		fmt.Fprintf(w, "Warning: daemon set %q looks managed by %s (%s): an %s in the cluster is reverted by the next sync; %s\n",
			ds.Name, g.Tool, g.Evidence, verb, instead)
	}
}

// gitOpsHint reminds that pause/resume annotations belong in git when the DaemonSet is synced from it.
func gitOpsHint(w io.Writer, ds *appsv1.DaemonSet, what string) {
	if g, ok := DetectGitOps(ds); ok {
		fmt.Fprintf(w, "Warning: daemon set %q looks managed by %s (%s): commit %s to its manifest in git, or a sync may undo this change\n",
			ds.Name, g.Tool, g.Evidence, what)
		return
	}
	fmt.Fprintf(w, "hint: if this DaemonSet is deployed from git (Argo CD, Flux), commit %s to its manifest too, or a sync may undo this change\n", what)
}

// noteAfterTemplateChange says what happens next when nothing, or nothing yet, rolls the new template out.
func noteAfterTemplateChange(w io.Writer, ds *appsv1.DaemonSet) {
	switch {
	case rolloutapi.IsManaged(ds) && ds.Annotations[rolloutapi.AnnotationPaused] == "true":
		fmt.Fprintf(w, "note: the rollout of daemon set %q is paused; run daemonguard rollout resume ds/%s -n %s to roll out the change\n", ds.Name, ds.Name, ds.Namespace)
	case ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType && !rolloutapi.IsManaged(ds):
		fmt.Fprintf(w, "note: daemon set %q uses updateStrategy OnDelete without %s: %q, so nothing replaces its pods until they are deleted\n", ds.Name, rolloutapi.AnnotationRollout, rolloutapi.RolloutManaged)
	}
}
