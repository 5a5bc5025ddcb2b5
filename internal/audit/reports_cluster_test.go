package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/audit"
	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

const crdName = "reports.openreports.io"

// setCRD installs the chart's copy of the OpenReports CRD and waits until it is served, or
// deletes it and waits until it is gone. It skips the test without the control plane.
func setCRD(t *testing.T, present bool) {
	t.Helper()
	localcluster.NeedCluster(t)
	if present {
		file := toolbin.RepoPath(t, "charts", "daemonguard", "files", "openreports.io_reports.yaml")
		clustertest.Kubectl(t, cluster, "", "apply", "--server-side", "-f", file)
		clustertest.Kubectl(t, cluster, "", "wait", "--for=condition=Established", "--timeout=60s", "crd/"+crdName)
		return
	}
	clustertest.Kubectl(t, cluster, "", "delete", "--ignore-not-found", "--wait=true", "--timeout=60s", "crd/"+crdName)
}

func typedClient(t *testing.T) client.Client {
	t.Helper()
	c, err := client.New(cluster.RESTConfig, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// daemonSet is a DaemonSet every built-in policy accepts, with what the inject policy adds, on no
// node (the audit reads templates; pods would only load the small machine). change edits it.
func daemonSet(ns, name string, change func(*appsv1.DaemonSet)) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: maps.Clone(labels)},
		Spec: appsv1.DaemonSetSpec{
			Selector:             &metav1.LabelSelector{MatchLabels: maps.Clone(labels)},
			RevisionHistoryLimit: ptr.To[int32](10),
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type:          appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:      map[string]string{"daemonguard.io/test-no-node": "true"},
					PriorityClassName: "system-node-critical",
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
					Containers: []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
				},
			},
		},
	}
	if change != nil {
		change(ds)
	}
	return ds
}

// testPolicySet is the built-in set with rollout_annotations turned to dryrun, so that the
// report shows all three enforcement actions.
func testPolicySet(t *testing.T) (*policy.Set, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "parameters.yaml"), []byte("enforcement: {rollout_annotations: dryrun}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := policy.CompileDirs(context.Background(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	return set, dir
}

// auditPass is one audit pass as the webhook's leader runs it: gather, decide, write.
func auditPass(t *testing.T, w *audit.ReportWriter, set *policy.Set) audit.ReportChanges {
	t.Helper()
	ctx := context.Background()
	findings, err := audit.Run(ctx, typedClient(t), set, []string{metav1.NamespaceSystem})
	if err != nil {
		t.Fatal(err)
	}
	changes, err := w.Write(ctx, findings, set)
	if err != nil {
		t.Fatalf("write reports: %v", err)
	}
	return changes
}

func reportsIn(t *testing.T, w *audit.ReportWriter, ns string) []openreports.Report {
	t.Helper()
	var list openreports.ReportList
	if err := w.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b openreports.Report) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// lines renders results as "daemonset policy result severity", sorted.
func lines(r openreports.Report) []string {
	var out []string
	for _, res := range r.Results {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %s", res.Subjects[0].Name, res.Policy, res.Result, res.Severity)))
	}
	slices.Sort(out)
	return out
}

func expect(ds string, overrides map[string]string) []string {
	base := map[string]string{
		"inject": "pass", "node_agent_grants": "pass high", "on_delete_managed": "pass medium", "revision_history": "pass high",
		"rolling_update_budget": "pass high", "rollout_annotations": "pass low",
	}
	var out []string
	for p, r := range base {
		if o, ok := overrides[p]; ok {
			r = o
		}
		out = append(out, ds+" "+p+" "+r)
	}
	slices.Sort(out)
	return out
}

// DaemonSets stored before daemonguard (or before a stricter policy) are reported as OpenReports
// Reports on the real API server: one Report in their namespace with a result per DaemonSet and
// policy; a pass that finds nothing new writes nothing; a DaemonSet made compliant turns its
// result to pass; deleted DaemonSets lose their results, and the namespace its Report.
func TestOpenReportsFollowTheDaemonSets(t *testing.T) {
	setCRD(t, true)
	ctx := context.Background()
	ns := cluster.NewTestNamespace(t)
	c := typedClient(t)
	set, policyDir := testPolicySet(t)
	for _, ds := range []*appsv1.DaemonSet{
		daemonSet(ns, "compliant", nil),
		daemonSet(ns, "wide", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("100%"))
		}),
		daemonSet(ns, "on-delete", func(ds *appsv1.DaemonSet) {
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
		}),
		daemonSet(ns, "paused-maybe", func(ds *appsv1.DaemonSet) {
			ds.Annotations = map[string]string{"daemonguard.io/paused": "maybe"}
		}),
		daemonSet(ns, "seed", func(ds *appsv1.DaemonSet) {
			ds.Spec.Template.Spec.Tolerations, ds.Spec.Template.Spec.PriorityClassName = nil, ""
		}),
		daemonSet(ns, "ignored", func(ds *appsv1.DaemonSet) {
			ds.Labels["daemonguard.io/ignore"] = "true"
			ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromString("100%"))
		}),
	} {
		if err := c.Create(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}
	w, err := audit.NewReportWriter(cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_800_000_000, 0)
	w.Now = func() time.Time { return t0 }
	auditPass(t, w, set)

	reports := reportsIn(t, w, ns)
	if len(reports) != 1 || reports[0].Name != "daemonguard" {
		t.Fatalf("reports in %s: %d, want one named daemonguard", ns, len(reports))
	}
	r := reports[0]
	want := slices.Concat(
		expect("compliant", nil),
		// The ignore label opts out of injection, never out of the audit.
		expect("ignored", map[string]string{"rolling_update_budget": "fail high"}),
		expect("on-delete", map[string]string{"on_delete_managed": "warn medium"}),
		expect("paused-maybe", map[string]string{"rollout_annotations": "fail low"}),
		expect("seed", map[string]string{"inject": "warn medium"}),
		expect("wide", map[string]string{"rolling_update_budget": "fail high"}),
	)
	slices.Sort(want)
	if got := lines(r); !slices.Equal(got, want) {
		t.Errorf("report results:\n  got  %q\n  want %q", got, want)
	}
	if r.Source != "daemonguard" || r.Labels[audit.ManagedByLabel] != audit.ManagedByValue {
		t.Errorf("report source %q, labels %v", r.Source, r.Labels)
	}
	if r.Summary != (openreports.ReportSummary{Pass: 31, Fail: 3, Warn: 2}) {
		t.Errorf("summary %+v, want 31 pass, 3 fail, 2 warn", r.Summary)
	}
	uids := map[string]string{}
	var list appsv1.DaemonSetList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, ds := range list.Items {
		uids[ds.Name] = string(ds.UID)
	}
	for _, res := range r.Results {
		if s := res.Subjects[0]; string(s.UID) != uids[s.Name] || s.Kind != "DaemonSet" || s.APIVersion != "apps/v1" || s.Namespace != ns {
			t.Errorf("result subject %+v does not name the DaemonSet (uid %s)", s, uids[s.Name])
		}
		if res.Result != "pass" && res.Description == "" {
			t.Errorf("%s %s: %s without the policy's message", res.Subjects[0].Name, res.Policy, res.Result)
		}
		if res.Policy == "rolling_update_budget" && res.Result == "fail" && !strings.Contains(res.Description, "100%") {
			t.Errorf("budget message %q does not quote the value", res.Description)
		}
		if res.Timestamp.Seconds != t0.Unix() {
			t.Errorf("result stamped %v, want %v", res.Timestamp, t0.Unix())
		}
	}

	// What a user sees (the README quotes this log).
	if out, errOut, err := cluster.Kubectl(ctx, "", "get", "reports", "-n", ns); err != nil {
		t.Errorf("kubectl get reports: %v\n%s", err, errOut)
	} else {
		t.Logf("kubectl get reports -n %s:\n%s", ns, out)
	}

	// The CLI prints the same Reports without writing them.
	var out bytes.Buffer
	cmd := cli.New()
	cmd.SetArgs([]string{"audit", "--kubeconfig", cluster.KubeconfigPath, "--policies", policyDir, "-o", "report"})
	cmd.SetOut(&out)
	if err := cmd.ExecuteContext(ctx); !cli.IsReported(err) {
		t.Fatalf("audit -o report with a deny-level finding returned %v, want the denial exit", err)
	}
	t.Logf("daemonguard audit -o report:\n%s", out.String())
	printed := 0
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		var p openreports.Report
		if err := yaml.UnmarshalStrict([]byte(strings.TrimPrefix(doc, "---\n")), &p); err != nil {
			t.Fatalf("audit -o report printed an invalid Report: %v\n%s", err, doc)
		}
		if p.Namespace == ns {
			printed++
			if p.Kind != "Report" || p.APIVersion != "openreports.io/v1alpha1" || !slices.Equal(lines(p), want) {
				t.Errorf("audit -o report printed %s %s with %q", p.APIVersion, p.Kind, lines(p))
			}
		}
	}
	if printed != 1 {
		t.Errorf("audit -o report printed %d Reports for %s, want 1", printed, ns)
	}

	// A pass that finds the same writes nothing, though the clock moved on.
	t1 := t0.Add(time.Hour)
	w.Now = func() time.Time { return t1 }
	auditPass(t, w, set)
	if again := reportsIn(t, w, ns); len(again) != 1 || again[0].ResourceVersion != r.ResourceVersion {
		t.Errorf("an unchanged pass rewrote the report (resourceVersion %s -> %v)", r.ResourceVersion, again)
	}

	// The wide budget narrowed: its result turns to pass (stamped now), the others keep theirs.
	var wide appsv1.DaemonSet
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "wide"}, &wide); err != nil {
		t.Fatal(err)
	}
	wide.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(1))
	if err := c.Update(ctx, &wide); err != nil {
		t.Fatal(err)
	}
	auditPass(t, w, set)
	r = reportsIn(t, w, ns)[0]
	if !slices.Contains(lines(r), "wide rolling_update_budget pass high") || r.Summary.Fail != 2 {
		t.Errorf("after the fix: summary %+v, results %q", r.Summary, lines(r))
	}
	for _, res := range r.Results {
		fresh := res.Subjects[0].Name == "wide" && res.Policy == "rolling_update_budget"
		if want := map[bool]int64{true: t1.Unix(), false: t0.Unix()}[fresh]; res.Timestamp.Seconds != want {
			t.Errorf("%s %s stamped %d, want %d", res.Subjects[0].Name, res.Policy, res.Timestamp.Seconds, want)
		}
	}

	// Deleted DaemonSets lose their results.
	for _, name := range []string{"wide", "seed", "on-delete", "paused-maybe"} {
		if err := c.Delete(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	auditPass(t, w, set)
	left := slices.Concat(expect("compliant", nil), expect("ignored", map[string]string{"rolling_update_budget": "fail high"}))
	slices.Sort(left)
	if got := lines(reportsIn(t, w, ns)[0]); !slices.Equal(got, left) {
		t.Errorf("after deleting all but compliant and ignored: %q", got)
	}

	// The last DaemonSets gone, the Report goes.
	for _, name := range []string{"compliant", "ignored"} {
		if err := c.Delete(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	changes := auditPass(t, w, set)
	if remaining := reportsIn(t, w, ns); len(remaining) != 0 {
		t.Errorf("namespace without DaemonSets still has %d reports", len(remaining))
	}
	if !slices.ContainsFunc(changes.Delete, func(r openreports.Report) bool { return r.Namespace == ns }) {
		t.Errorf("changes %s do not delete the report of %s", changes, ns)
	}
}

// A namespace with a thousand DaemonSets (5,000 results, about 1.7 MB of JSON, over etcd's 1.5 MiB
// request limit in one object) is written as several Reports the API server accepts, each within
// audit.MaxReportBytes; deleting the DaemonSets deletes them all.
func TestOpenReportsSplitALargeNamespace(t *testing.T) {
	setCRD(t, true)
	ctx := context.Background()
	ns := cluster.NewTestNamespace(t)
	c := typedClient(t)
	const n = 1000
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	jobs := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				if err := c.Create(ctx, daemonSet(ns, fmt.Sprintf("agent-%04d", i), nil)); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("created %d DaemonSets in %v", n, time.Since(start).Round(time.Millisecond))

	w, err := audit.NewReportWriter(cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	set, _ := testPolicySet(t)
	auditPass(t, w, set)
	reports := reportsIn(t, w, ns)
	t.Logf("audit pass with %d reports in %v", len(reports), time.Since(start).Round(time.Millisecond))
	if len(reports) < 2 {
		t.Fatalf("%d reports for %d DaemonSets; want a split", len(reports), n)
	}
	results, total := 0, 0
	seen, names := map[string]bool{}, map[string]bool{}
	for _, r := range reports {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		total += len(raw)
		if len(raw) > audit.MaxReportBytes {
			t.Errorf("%s is %d bytes as stored, over %d", r.Name, len(raw), audit.MaxReportBytes)
		}
		names[r.Name] = true
		results += len(r.Results)
		for _, res := range r.Results {
			seen[res.Subjects[0].Name] = true
		}
	}
	// One result per DaemonSet and built-in policy, as expect lists them.
	perDaemonSet := len(expect("", nil))
	if results != n*perDaemonSet || len(seen) != n {
		t.Errorf("%d results about %d DaemonSets, want %d about %d", results, len(seen), n*perDaemonSet, n)
	}
	for i := range reports {
		want := "daemonguard"
		if i > 0 {
			want = fmt.Sprintf("daemonguard-%d", i)
		}
		if !names[want] {
			t.Errorf("reports %v: no %s; want daemonguard, daemonguard-1, ... without gaps", names, want)
		}
	}
	t.Logf("%d results in %d reports, %d bytes in all", results, len(reports), total)

	if err := c.DeleteAllOf(ctx, &appsv1.DaemonSet{}, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	auditPass(t, w, set)
	if remaining := reportsIn(t, w, ns); len(remaining) != 0 {
		t.Errorf("%d reports left after the DaemonSets were deleted", len(remaining))
	}
}

// Without the CRD, or without permission, writing Reports fails with an error that says which;
// the webhook's periodic audit logs and counts it, and still reports Events. Once the CRD is
// installed the next pass writes the Report, without a restart.
func TestOpenReportsWithoutCRDOrRBAC(t *testing.T) {
	setCRD(t, false)
	ctx := context.Background()
	ns := cluster.NewTestNamespace(t)
	set, _ := testPolicySet(t)
	seed := daemonSet(ns, "seed", func(ds *appsv1.DaemonSet) {
		ds.Spec.Template.Spec.Tolerations, ds.Spec.Template.Spec.PriorityClassName = nil, ""
	})
	if err := typedClient(t).Create(ctx, seed); err != nil {
		t.Fatal(err)
	}
	findings, err := audit.Run(ctx, typedClient(t), set, []string{metav1.NamespaceSystem})
	if err != nil {
		t.Fatal(err)
	}
	w := writeFails(t, cluster.RESTConfig, findings, set, audit.ErrReportsCRDMissing, "the CRD")

	setCRD(t, true)
	nobody := rest.CopyConfig(cluster.RESTConfig)
	nobody.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:default:nobody"}
	writeFails(t, nobody, findings, set, audit.ErrReportsForbidden, "RBAC")

	// The periodic audit of the webhook, started without the CRD.
	setCRD(t, false)
	before := failures(t, "crd_missing")
	hook, err := harness.StartWebhook(ctx, cluster, harness.Options{AuditInterval: time.Second, OpenReports: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hook.Stop()
	cluster.WaitFor(t, 2*time.Minute, "a counted crd_missing failure and the InjectionMissing Event", func(ctx context.Context) (bool, string) {
		evs, err := cluster.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		event := slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool { return e.Reason == "InjectionMissing" && e.Regarding.Name == "seed" })
		n := failures(t, "crd_missing")
		return event && n > before, fmt.Sprintf("event %v, crd_missing failures %v (before %v)", event, n, before)
	})
	setCRD(t, true)
	cluster.WaitFor(t, time.Minute, "the Report once the CRD is installed", func(ctx context.Context) (bool, string) {
		var list openreports.ReportList
		if err := w.Client.List(ctx, &list, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
			return false, err.Error()
		}
		for _, r := range list.Items {
			if slices.Contains(lines(r), "seed inject warn medium") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d reports", len(list.Items))
	})
}

// writeFails writes the findings' Reports with a ReportWriter for cfg, which lacks what (the CRD,
// RBAC), and checks that the write fails with want. It returns the writer.
func writeFails(t *testing.T, cfg *rest.Config, findings []audit.Finding, set *policy.Set, want error, what string) *audit.ReportWriter {
	t.Helper()
	w, err := audit.NewReportWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(context.Background(), findings, set); !errors.Is(err, want) {
		t.Errorf("write without %s: %v, want %v", what, err, want)
	} else {
		t.Logf("without %s: %v", what, err)
	}
	return w
}

// failures reads daemonguard_audit_report_failures_total{reason} from the process's registry
// (the harness runs the webhook in this process).
func failures(t *testing.T, reason string) float64 {
	t.Helper()
	n, found, err := harness.Counter("daemonguard_audit_report_failures_total", "reason", reason)
	if err != nil {
		t.Fatal(err)
	}
	if !found {
		t.Fatal("daemonguard_audit_report_failures_total is not registered")
	}
	return n
}
