package rolloutcli_test

// Integration tests: `daemonguard rollout ...` run in-process (cli.New) against the real local
// control plane, whose DaemonSet controller creates the ControllerRevisions and rolls
// RollingUpdate DaemonSets out. daemonguard's rollout controller does not run here: managed
// DaemonSets are exercised for pause/resume (annotations written) and for status waiting on it.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"

	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/internal/rolloutcli"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

var cluster *localcluster.Cluster

func TestMain(m *testing.M) {
	os.Exit(localcluster.RunTests(m, localcluster.Config{}, &cluster))
}

// run executes `daemonguard rollout args...` against the cluster like main does.
func run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := cli.New()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append(append([]string{"rollout"}, args...), "--kubeconfig", cluster.KubeconfigPath))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// mustRun is run that fails the test on an error.
func mustRun(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	out, errOut, err := run(t, args...)
	if err != nil {
		t.Fatalf("daemonguard rollout %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out, errOut
}

func getDS(t *testing.T, ns, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := cluster.Client.AppsV1().DaemonSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// revisions returns the DaemonSet's ControllerRevisions by number.
func revisions(t *testing.T, ns, name string) map[int64]*appsv1.ControllerRevision {
	t.Helper()
	revs, err := rolloutcli.Revisions(context.Background(), cluster.Client, getDS(t, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	byNumber := map[int64]*appsv1.ControllerRevision{}
	for _, r := range revs {
		byNumber[r.Revision] = r
	}
	return byNumber
}

// waitRevisions waits until the DaemonSet's revision numbers are want and returns them.
func waitRevisions(t *testing.T, ns, name string, want ...int64) map[int64]*appsv1.ControllerRevision {
	t.Helper()
	var got map[int64]*appsv1.ControllerRevision
	cluster.WaitFor(t, time.Minute, fmt.Sprintf("revisions %v of %s", want, name), func(context.Context) (bool, string) {
		got = revisions(t, ns, name)
		var numbers []int64
		for n := range got {
			numbers = append(numbers, n)
		}
		slices.Sort(numbers)
		return slices.Equal(numbers, want), fmt.Sprintf("revisions %v", numbers)
	})
	return got
}

func image(ds *appsv1.DaemonSet) string { return ds.Spec.Template.Spec.Containers[0].Image }

func revisionImage(t *testing.T, ds *appsv1.DaemonSet, rev *appsv1.ControllerRevision) string {
	t.Helper()
	tmpl, err := rolloutapi.RevisionTemplate(ds, rev)
	if err != nil {
		t.Fatal(err)
	}
	return tmpl.Spec.Containers[0].Image
}

// historyRevisions parses the REVISION column of `rollout history`.
func historyRevisions(out string) []string {
	var revs []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] != "REVISION" && !strings.HasPrefix(f[0], "daemonset") {
			revs = append(revs, f[0])
		}
	}
	return revs
}

// rolledOut checks the DaemonSet as kubectl rollout status judges it.
func assertRolledOut(t *testing.T, ds *appsv1.DaemonSet, desired int32) {
	t.Helper()
	s := ds.Status
	if s.ObservedGeneration != ds.Generation || s.DesiredNumberScheduled != desired || s.UpdatedNumberScheduled != desired || s.NumberAvailable != desired {
		t.Errorf("status returned but the DaemonSet is not rolled out: generation %d, status %+v", ds.Generation, s)
	}
}

// The story of an unmanaged RollingUpdate DaemonSet, with kubectl rollout semantics throughout:
// status follows creation and an image change to completion, history lists the revisions, undo
// restores revision 1's template as the new revision 3, restart makes revision 4, and pause is
// refused because the built-in controller cannot pause.
func TestUnmanagedRollingUpdateDaemonSet(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, "", "apply", "-n", ns, "-f", clustertest.SeedManifest(t))

	// status follows the first rollout (4 untainted workers) to completion.
	out, _ := mustRun(t, "status", "ds/nginx-ds", "-n", ns)
	if !strings.HasSuffix(out, "daemon set \"nginx-ds\" successfully rolled out\n") {
		t.Errorf("status output:\n%s", out)
	}
	assertRolledOut(t, getDS(t, ns, "nginx-ds"), 4)

	// An image change: status follows it until every pod runs the new template.
	clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/nginx-ds", "nginx-ds=nginx:1.9.1")
	out, _ = mustRun(t, "status", "daemonset/nginx-ds", "-n", ns, "--timeout=2m")
	if !strings.Contains(out, "successfully rolled out") {
		t.Errorf("status output:\n%s", out)
	}
	assertRolledOut(t, getDS(t, ns, "nginx-ds"), 4)

	// history: revisions 1 and 2, as kubectl lists them; --revision shows a template.
	revs := waitRevisions(t, ns, "nginx-ds", 1, 2)
	out, _ = mustRun(t, "history", "ds/nginx-ds", "-n", ns)
	if got := historyRevisions(out); !slices.Equal(got, []string{"1", "2"}) || !strings.Contains(out, "<none>") {
		t.Errorf("history lists %v, want 1 and 2:\n%s", got, out)
	}
	if kout := clustertest.Kubectl(t, cluster, "", "rollout", "history", "-n", ns, "ds/nginx-ds"); !slices.Equal(historyRevisions(kout), historyRevisions(out)) {
		t.Errorf("kubectl lists other revisions:\n%s\nthan daemonguard:\n%s", kout, out)
	}
	out, _ = mustRun(t, "history", "nginx-ds", "-n", ns, "--revision", "1")
	if !strings.Contains(out, "with revision #1") || !strings.Contains(out, "image: nginx:1.7.9") {
		t.Errorf("history --revision 1:\n%s", out)
	}
	if _, _, err := run(t, "history", "ds/nginx-ds", "-n", ns, "--revision", "9"); err == nil || !strings.Contains(err.Error(), "unable to find revision 9") {
		t.Errorf("history --revision 9: %v", err)
	}

	// undo --dry-run shows revision 1's template and changes nothing.
	out, _ = mustRun(t, "undo", "ds/nginx-ds", "-n", ns, "--dry-run")
	if !strings.Contains(out, "will roll back to revision 1") || !strings.Contains(out, "image: nginx:1.7.9") {
		t.Errorf("undo --dry-run:\n%s", out)
	}
	if got := image(getDS(t, ns, "nginx-ds")); got != "nginx:1.9.1" {
		t.Fatalf("undo --dry-run changed the image to %s", got)
	}

	// The DaemonSet now carries Argo CD's tracking label (metadata only, no new revision): undo
	// warns that the next sync reverts it.
	clustertest.Kubectl(t, cluster, "", "label", "-n", ns, "ds/nginx-ds", "app.kubernetes.io/instance=demo")
	out, errOut := mustRun(t, "undo", "ds/nginx-ds", "-n", ns)
	if !strings.Contains(out, "daemonset.apps/nginx-ds rolled back to revision 1") {
		t.Errorf("undo output:\n%s", out)
	}
	if !strings.Contains(errOut, "Warning:") || !strings.Contains(errOut, "Argo CD") || !strings.Contains(errOut, "revert the change in git") {
		t.Errorf("undo of a GitOps-managed DaemonSet printed no warning:\n%s", errOut)
	}
	undone := getDS(t, ns, "nginx-ds")
	if image(undone) != "nginx:1.7.9" {
		t.Errorf("after undo the template has %s, want nginx:1.7.9", image(undone))
	}
	// kubectl semantics: revision 1's ControllerRevision is renumbered 3; 2 remains.
	revs3 := waitRevisions(t, ns, "nginx-ds", 2, 3)
	if got := revisionImage(t, undone, revs3[3]); got != "nginx:1.7.9" {
		t.Errorf("revision 3 has %s, want the restored nginx:1.7.9", got)
	}
	if revs3[3].UID != revs[1].UID {
		t.Errorf("revision 3 is a new ControllerRevision, want revision 1's renumbered (as the DaemonSet controller does)")
	}
	mustRun(t, "status", "ds/nginx-ds", "-n", ns, "--timeout=2m")
	assertRolledOut(t, getDS(t, ns, "nginx-ds"), 4)

	// undo to the current template is skipped, like kubectl.
	out, _ = mustRun(t, "undo", "ds/nginx-ds", "-n", ns, "--to-revision=3")
	if !strings.Contains(out, "skipped rollback (current template already matches revision 3)") {
		t.Errorf("undo --to-revision=3:\n%s", out)
	}
	if _, _, err := run(t, "undo", "ds/nginx-ds", "-n", ns, "--to-revision=1"); err == nil || !strings.Contains(err.Error(), "unable to find specified revision 1") {
		t.Errorf("undo to a renumbered revision: %v", err)
	}

	// restart: a new template annotation, hence revision 4, rolled out.
	out, _ = mustRun(t, "restart", "ds/nginx-ds", "-n", ns)
	if !strings.Contains(out, "daemonset.apps/nginx-ds restarted") {
		t.Errorf("restart output:\n%s", out)
	}
	restarted := getDS(t, ns, "nginx-ds")
	at := restarted.Spec.Template.Annotations[rolloutcli.RestartedAtAnnotation]
	if _, err := time.Parse(time.RFC3339, at); err != nil {
		t.Errorf("template annotation %s = %q, want an RFC 3339 time", rolloutcli.RestartedAtAnnotation, at)
	}
	revs4 := waitRevisions(t, ns, "nginx-ds", 2, 3, 4)
	if tmpl, _ := rolloutapi.RevisionTemplate(restarted, revs4[4]); tmpl.Annotations[rolloutcli.RestartedAtAnnotation] != at {
		t.Errorf("revision 4 does not record the restart annotation")
	}
	mustRun(t, "status", "ds/nginx-ds", "-n", ns, "--timeout=2m")

	// pause and resume need daemonguard's controller.
	for _, verb := range []string{"pause", "resume"} {
		_, _, err := run(t, verb, "ds/nginx-ds", "-n", ns)
		if err == nil || !strings.Contains(err.Error(), "built-in DaemonSet controller cannot pause") || !strings.Contains(err.Error(), `daemonguard.io/rollout: "managed"`) {
			t.Errorf("%s of an unmanaged DaemonSet: %v", verb, err)
		}
	}
	if a := getDS(t, ns, "nginx-ds").Annotations; a[rolloutapi.AnnotationPaused] != "" || a[rolloutapi.AnnotationResume] != "" {
		t.Errorf("refused pause/resume wrote annotations: %v", a)
	}
}

const slowDS = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: slow}
spec:
  minReadySeconds: 3600
  selector: {matchLabels: {app: slow}}
  template:
    metadata: {labels: {app: slow}}
    spec: {containers: [{name: slow, image: slow:1}]}
`

// A rollout that cannot finish (pods are ready but count as available only after an hour):
// status --timeout gives up with a timeout error; --watch=false reports once and succeeds.
func TestStatusTimesOut(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, slowDS, "apply", "-n", ns, "-f", "-")

	start := time.Now()
	out, _, err := run(t, "status", "ds/slow", "-n", ns, "--timeout=1s")
	var te *rolloutcli.TimeoutError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), `timed out after 1s waiting for the rollout of daemon set "slow"`) {
		t.Fatalf("status --timeout=1s returned %v\n%s", err, out)
	}
	if elapsed := time.Since(start); elapsed > 30*time.Second {
		t.Errorf("status --timeout=1s took %s", elapsed)
	}
	if _, _, err := run(t, "status", "ds/slow", "-n", ns, "--watch=false"); err != nil {
		t.Errorf("status --watch=false: %v", err)
	}
	if _, _, err := run(t, "status", "ds/missing", "-n", ns); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("status of a missing DaemonSet: %v", err)
	}
}

const onDeleteDS = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: manual}
spec:
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: manual}}
  template:
    metadata: {labels: {app: manual}}
    spec: {containers: [{name: manual, image: manual:1}]}
`

// An unmanaged OnDelete DaemonSet is rolled out by nobody: status says so and exits 0.
func TestStatusOfUnmanagedOnDelete(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, onDeleteDS, "apply", "-n", ns, "-f", "-")
	out, _ := mustRun(t, "status", "ds/manual", "-n", ns)
	if !strings.Contains(out, "nothing rolls its pods out") || !strings.Contains(out, `daemonguard.io/rollout: "managed"`) {
		t.Errorf("status of an unmanaged OnDelete DaemonSet:\n%s", out)
	}
	// restart changes the template, and says that nothing will replace the pods.
	_, errOut := mustRun(t, "restart", "ds/manual", "-n", ns)
	if !strings.Contains(errOut, "nothing replaces its pods") {
		t.Errorf("restart of an unmanaged OnDelete DaemonSet printed no note:\n%s", errOut)
	}
}

const managedDS = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
  annotations: {daemonguard.io/rollout: managed, daemonguard.io/steps: "1,pause,100%"}
spec:
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: agent:1}]}
`

// pause and resume write the annotations daemonguard's rollout controller reads; each resume
// sets a new token so an indefinite pause step also ends.
func TestPauseResumeManaged(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, managedDS, "apply", "-n", ns, "-f", "-")

	out, errOut := mustRun(t, "pause", "ds/agent", "-n", ns)
	if out != "daemonset.apps/agent paused\n" || !strings.Contains(errOut, "commit daemonguard.io/paused: \"true\"") {
		t.Errorf("pause printed:\n%s%s", out, errOut)
	}
	if got := getDS(t, ns, "agent").Annotations[rolloutapi.AnnotationPaused]; got != "true" {
		t.Errorf("after pause %s = %q", rolloutapi.AnnotationPaused, got)
	}
	if out, _ = mustRun(t, "pause", "agent", "-n", ns); out != "daemonset.apps/agent already paused\n" {
		t.Errorf("second pause printed %q", out)
	}

	var tokens []string
	for range 2 {
		out, _ = mustRun(t, "resume", "ds/agent", "-n", ns)
		a := getDS(t, ns, "agent").Annotations
		token := a[rolloutapi.AnnotationResume]
		if a[rolloutapi.AnnotationPaused] != "false" || token == "" || !strings.Contains(out, token) {
			t.Fatalf("after resume: annotations %v, output %q", a, out)
		}
		if _, err := time.Parse(time.RFC3339Nano, token); err != nil {
			t.Errorf("resume token %q is not an RFC 3339 time: %v", token, err)
		}
		tokens = append(tokens, token)
	}
	if tokens[0] == tokens[1] {
		t.Errorf("resume did not change the token: %v", tokens)
	}
	// The settings written by the user are untouched.
	if got := getDS(t, ns, "agent").Annotations[rolloutapi.AnnotationSteps]; got != "1,pause,100%" {
		t.Errorf("steps annotation = %q", got)
	}

	// Without daemonguard's controller in this cluster nothing reports on the rollout: status
	// says what it waits for, and times out. First let the DaemonSet controller observe the
	// spec, so the message is about the rollout controller, not about that.
	clustertest.WaitDaemonSet(t, cluster, ns, "agent", time.Minute, "the DaemonSet controller to observe the spec", func(ds *appsv1.DaemonSet) (bool, string) {
		return ds.Status.ObservedGeneration >= ds.Generation, fmt.Sprintf("observed %d of %d", ds.Status.ObservedGeneration, ds.Generation)
	})
	out, _ = mustRun(t, "status", "ds/agent", "-n", ns, "--watch=false")
	if !strings.Contains(out, "daemonguard's rollout controller") {
		t.Errorf("status --watch=false of a managed DaemonSet without controller:\n%s", out)
	}
	if _, _, err := run(t, "status", "ds/agent", "-n", ns, "--timeout=1s"); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Errorf("status --timeout=1s without controller: %v", err)
	}
}

// Without -n the namespace is the kubeconfig context's, and --context selects the context.
func TestNamespaceFromContext(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, onDeleteDS, "apply", "-n", ns, "-f", "-")
	// The DaemonSet controller writes the first revision after the DaemonSet is stored; until then
	// history has nothing to list.
	cluster.WaitFor(t, time.Minute, "the DaemonSet's first ControllerRevision", func(ctx context.Context) (bool, string) {
		revs, err := cluster.Client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(revs.Items) > 0, fmt.Sprintf("%d revisions", len(revs.Items))
	})

	cfg, err := clientcmd.LoadFromFile(cluster.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext].DeepCopy()
	ctx.Namespace = ns
	cfg.Contexts["rollout-test"] = ctx
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	cmd := cli.New()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"rollout", "history", "ds/manual", "--kubeconfig", path, "--context", "rollout-test"})
	if err := cmd.ExecuteContext(context.Background()); err != nil || !strings.Contains(out.String(), "REVISION") {
		t.Errorf("history in the context's namespace: %v\n%s", err, out.String())
	}
	cmd = cli.New()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetArgs([]string{"rollout", "history", "ds/manual", "--kubeconfig", path})
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("history in the current context's namespace (default) found the DaemonSet: %v", err)
	}
}

// startController runs daemonguard's rollout controller until the test ends.
func startController(t *testing.T) {
	t.Helper()
	ctl, err := harness.StartController(context.Background(), cluster)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctl.Stop(); err != nil {
			t.Errorf("controller: %v", err)
		}
	})
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// report writes what daemonguard's rollout controller would: status annotations, then the one
// True rollout condition.
func report(t *testing.T, ns, name string, annotations map[string]string, phase appsv1.DaemonSetConditionType, reason, message string) {
	t.Helper()
	ctx := context.Background()
	patch, err := rolloutcli.AnnotationsPatch(annotations)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.Client.AppsV1().DaemonSets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds := getDS(t, ns, name)
		ds.Status.Conditions = nil
		for _, ct := range []appsv1.DaemonSetConditionType{rolloutapi.ConditionComplete, rolloutapi.ConditionFailed, rolloutapi.ConditionPaused, rolloutapi.ConditionProgressing} {
			c := appsv1.DaemonSetCondition{Type: ct, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}
			if ct == phase {
				c.Status, c.Reason, c.Message = corev1.ConditionTrue, reason, message
			}
			ds.Status.Conditions = append(ds.Status.Conditions, c)
		}
		_, err := cluster.Client.AppsV1().DaemonSets(ns).UpdateStatus(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// currentHash waits for the DaemonSet controller to record the current template and returns its
// controller-revision-hash.
func currentHash(t *testing.T, ns, name string, revision int64) string {
	t.Helper()
	revs := waitRevisions(t, ns, name, func() []int64 {
		var r []int64
		for i := int64(1); i <= revision; i++ {
			r = append(r, i)
		}
		return r
	}()...)
	return revs[revision].Labels[appsv1.ControllerRevisionHashLabelKey]
}

// status follows a managed DaemonSet through what its controller reports (played here by the
// test): progress, an indefinite pause, completion; a failure ends it with exit 1, and a failure
// reported for the previous revision is not taken for the new template's.
func TestStatusFollowsTheRolloutController(t *testing.T) {
	localcluster.NeedCluster(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, managedDS, "apply", "-n", ns, "-f", "-")
	hash := currentHash(t, ns, "agent", 1)
	clustertest.WaitDaemonSet(t, cluster, ns, "agent", time.Minute, "pods of the managed DaemonSet available", func(ds *appsv1.DaemonSet) (bool, string) {
		s := ds.Status
		return s.ObservedGeneration > 0 && s.DesiredNumberScheduled == 4 && s.NumberAvailable == 4 && s.UpdatedNumberScheduled == 4, fmt.Sprintf("%+v", s)
	})

	out := &syncBuffer{}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		cmd := cli.New()
		cmd.SetOut(out)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"rollout", "status", "ds/agent", "-n", ns, "--kubeconfig", cluster.KubeconfigPath, "--timeout=2m"})
		done <- cmd.ExecuteContext(ctx)
	}()
	waitOutput := func(what string) {
		t.Helper()
		cluster.WaitFor(t, time.Minute, "status prints "+what, func(context.Context) (bool, string) {
			select {
			case err := <-done:
				t.Fatalf("status returned early: %v\n%s", err, out.String())
			default:
			}
			return strings.Contains(out.String(), what), out.String()
		})
	}
	waitOutput("Waiting for daemonguard's rollout controller")
	report(t, ns, "agent", map[string]string{rolloutapi.StatusRevision: hash, rolloutapi.StatusStep: "1/3: 1", rolloutapi.StatusUpdated: "0/4",
		rolloutapi.StatusNextNodes: "worker-0 (workers before control-plane nodes, then by name)"}, rolloutapi.ConditionProgressing, "RolloutProgressing",
		"step 1/3 (1): 0 of 4 nodes updated, 0 unavailable of budget 1; next: worker-0")
	waitOutput(`Waiting for daemon set "agent" rollout to finish: step 1/3 (1): 0 of 4 nodes updated, 0 unavailable of budget 1; next: worker-0...`)
	report(t, ns, "agent", map[string]string{rolloutapi.StatusStep: "2/3: pause", rolloutapi.StatusUpdated: "1/4", rolloutapi.StatusNextNodes: ""},
		rolloutapi.ConditionPaused, "PausedAtStep", "step 2/3 (pause): paused until daemonguard.io/resume changes; 1 of 4 nodes updated")
	waitOutput("is paused: PausedAtStep")
	report(t, ns, "agent", map[string]string{rolloutapi.StatusStep: "3/3: done", rolloutapi.StatusUpdated: "4/4"},
		rolloutapi.ConditionComplete, "RolloutComplete", "4 of 4 nodes run revision "+hash)
	select {
	case err := <-done:
		if err != nil || !strings.HasSuffix(out.String(), "successfully rolled out (4 of 4 nodes run revision "+hash+")\n") {
			t.Fatalf("status of a completed managed rollout: %v\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("status did not return after Complete:\n%s", out.String())
	}

	// A failure of the current revision: exit 1 with the controller's reason and message.
	report(t, ns, "agent", map[string]string{rolloutapi.StatusFailedRevision: hash}, rolloutapi.ConditionFailed, "PodFailure", "new pods fail: agent-x on worker-0: ImagePullBackOff")
	_, _, err := run(t, "status", "ds/agent", "-n", ns, "--timeout=1m")
	var failed *rolloutcli.FailedError
	if !errors.As(err, &failed) || !strings.Contains(err.Error(), "PodFailure: new pods fail: agent-x on worker-0: ImagePullBackOff") {
		t.Fatalf("status of a failed rollout returned %v", err)
	}

	// A new template: the Failed condition is about the previous revision until the controller
	// reports on the new one, so status waits (here: times out) instead of failing.
	clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/agent", "agent=agent:2")
	newHash := currentHash(t, ns, "agent", 2)
	stdout, _, err := run(t, "status", "ds/agent", "-n", ns, "--timeout=2s")
	var timeout *rolloutcli.TimeoutError
	if !errors.As(err, &timeout) || !strings.Contains(stdout, "start rolling out revision "+newHash) {
		t.Fatalf("status right after a new template returned %v\n%s", err, stdout)
	}
}

const controlledDS = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: web
  annotations: {daemonguard.io/rollout: managed, daemonguard.io/steps: "1,pause,100%"}
spec:
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: "nginx:1.7.9"}]}
`

// The whole loop with daemonguard's real rollout controller: status follows a canary rollout
// into its indefinite pause, resume lets it finish; a failing image (kwok's ImagePullBackOff for
// nginx:1.91) makes status exit 1; undo restores the previous template and status follows the
// roll-back to completion, not misled by the failure of the abandoned revision.
func TestWithTheRolloutController(t *testing.T) {
	localcluster.NeedCluster(t)
	startController(t)
	ns := cluster.NewTestNamespace(t)
	clustertest.Kubectl(t, cluster, controlledDS, "apply", "-n", ns, "-f", "-")
	out, _ := mustRun(t, "status", "ds/web", "-n", ns, "--timeout=2m")
	if !strings.Contains(out, `daemon set "web" successfully rolled out`) {
		t.Fatalf("status of the first rollout:\n%s", out)
	}

	// A new image: the canary step updates one node, then the rollout pauses until resumed.
	clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/web", "web=nginx:1.25.5")
	buf := &syncBuffer{}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		cmd := cli.New()
		cmd.SetOut(buf)
		cmd.SetErr(io.Discard)
		cmd.SetArgs([]string{"rollout", "status", "ds/web", "-n", ns, "--kubeconfig", cluster.KubeconfigPath, "--timeout=2m"})
		done <- cmd.ExecuteContext(ctx)
	}()
	cluster.WaitFor(t, 2*time.Minute, "status reports the pause step", func(context.Context) (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("status returned during the pause: %v\n%s", err, buf.String())
		default:
		}
		return strings.Contains(buf.String(), "is paused: PausedAtStep: step 2/3"), buf.String()
	})
	mustRun(t, "resume", "ds/web", "-n", ns)
	select {
	case err := <-done:
		if err != nil || !strings.Contains(buf.String(), "successfully rolled out") {
			t.Fatalf("status after resume: %v\n%s", err, buf.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("status did not finish after resume:\n%s", buf.String())
	}
	if ds := getDS(t, ns, "web"); image(ds) != "nginx:1.25.5" || ds.Status.UpdatedNumberScheduled != 4 || ds.Status.NumberAvailable != 4 {
		t.Errorf("after the rollout: image %s, status %+v", image(ds), ds.Status)
	}

	// A failing image: the canary pod cannot pull it, the controller reports Failed, status exits 1.
	clustertest.Kubectl(t, cluster, "", "annotate", "-n", ns, "ds/web", "daemonguard.io/steps-")
	clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/web", "web=nginx:1.91")
	_, _, err := run(t, "status", "ds/web", "-n", ns, "--timeout=2m")
	var failed *rolloutcli.FailedError
	if !errors.As(err, &failed) || !strings.Contains(err.Error(), "ImagePullBackOff") {
		t.Fatalf("status of a failing rollout returned %v", err)
	}

	// undo restores nginx:1.25.5; status follows the roll-back instead of repeating the failure.
	out, _ = mustRun(t, "undo", "ds/web", "-n", ns)
	if !strings.Contains(out, "rolled back to revision 2") {
		t.Errorf("undo:\n%s", out)
	}
	out, _, err = run(t, "status", "ds/web", "-n", ns, "--timeout=2m")
	if err != nil || !strings.Contains(out, "successfully rolled out") {
		ds := getDS(t, ns, "web")
		t.Fatalf("status after undo: %v\n%s\n(DaemonSet generation %d, status %+v, annotations %v)", err, out, ds.Generation, ds.Status, ds.Annotations)
	}
	if ds := getDS(t, ns, "web"); image(ds) != "nginx:1.25.5" || ds.Status.UpdatedNumberScheduled != 4 || ds.Status.NumberAvailable != 4 {
		t.Errorf("after undo: image %s, status %+v", image(ds), ds.Status)
	}
	waitRevisions(t, ns, "web", 1, 3, 4)
}
