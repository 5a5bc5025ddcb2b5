package preflight

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// TestApplyMergeIsKubectlApply holds the plan's merge to kubectl apply's three-way semantics: a
// field the last apply set and the manifest drops is removed; a field the server defaulted or
// another writer set, which the manifest never had, stays.
func TestApplyMergeIsKubectlApply(t *testing.T) {
	lastApplied := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"a","namespace":"default"},"spec":{"template":{"spec":{"nodeSelector":{"zone":"a"},"containers":[{"name":"c","image":"img:1"}]}}}}`
	live := &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default", Annotations: map[string]string{lastAppliedAnnotation: lastApplied}},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector:  map[string]string{"zone": "a"},
			DNSPolicy:     corev1.DNSClusterFirst, // defaulted by the API server
			Containers:    []corev1.Container{{Name: "c", Image: "img:1", ImagePullPolicy: corev1.PullIfNotPresent}},
			RestartPolicy: corev1.RestartPolicyAlways,
		}}},
	}
	current, err := json.Marshal(live)
	if err != nil {
		t.Fatal(err)
	}
	manifest := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"a","namespace":"default"},"spec":{"template":{"spec":{"containers":[{"name":"c","image":"img:2"}]}}}}`
	merged, err := applyMerge(live, current, []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	var got appsv1.DaemonSet
	if err := json.Unmarshal(merged, &got); err != nil {
		t.Fatal(err)
	}
	spec := got.Spec.Template.Spec
	if spec.NodeSelector != nil {
		t.Errorf("the node selector the last apply set and the manifest dropped is kept: %v", spec.NodeSelector)
	}
	if spec.DNSPolicy != corev1.DNSClusterFirst || spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("defaulted fields are lost: %+v", spec)
	}
	if spec.Containers[0].Image != "img:2" {
		t.Errorf("image = %s, want the manifest's img:2", spec.Containers[0].Image)
	}
	if _, err := applyMerge(live, current, []byte(`{"spec":`)); err == nil {
		t.Error("a manifest that is not JSON must be an error")
	}
}

// TestExitStatus holds the order of the plan's outcomes: an error, a denial, a pod that does not
// fit, an analysis gate that would not pass today, fine.
func TestExitStatus(t *testing.T) {
	fine := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{}}
	notFit := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Summary: Summary{NotFit: 1}}}
	preempts := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Summary: Summary{Preempting: 1}}}
	denied := Report{Admission: AdmissionReport{Allowed: false}}
	broken := Report{Error: "decode object"}
	gateFails := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Analysis: &AnalysisCheck{Ran: true, Gates: []GateCheck{{Name: "errors", Result: GateFail}}}}}
	noPrometheus := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Analysis: &AnalysisCheck{Gates: []GateCheck{{Name: "errors", Result: GateError}}}}}
	notRun := Report{Admission: AdmissionReport{Allowed: true}, Plan: &Impact{Analysis: &AnalysisCheck{NotRun: gatesNotRun, Gates: []GateCheck{{Name: "errors", Result: GateNotRun}}}}}
	cases := []struct {
		name    string
		reports []Report
		want    int
	}{
		{"nothing to plan", nil, 0},
		{"fine", []Report{fine, fine}, 0},
		{"not fit", []Report{fine, notFit}, exitPlanNotFit},
		{"preempts", []Report{preempts}, exitPlanNotFit},
		{"a denial outranks a pod that does not fit", []Report{notFit, denied}, exitPlanDenied},
		{"an error outranks everything", []Report{denied, broken, notFit}, 1},
		{"a gate that would not pass today", []Report{fine, gateFails}, exitPlanGates},
		{"Prometheus not answering is a finding", []Report{noPrometheus}, exitPlanGates},
		{"gates not run find nothing", []Report{notRun}, 0},
		{"a pod that does not fit outranks a gate", []Report{gateFails, notFit, gateFails}, exitPlanNotFit},
		{"a denial outranks a gate", []Report{gateFails, denied}, exitPlanDenied},
	}
	for _, tc := range cases {
		if got := ExitStatus(tc.reports); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestRenderPlans(t *testing.T) {
	plan := &Impact{
		Namespace: "default", Name: "agent", Operation: "update", NewRevision: true,
		TemplateChanges: []string{"spec.template.spec.containers[0].image"},
		Nodes: []NodeImpact{
			{Node: "w1", Today: &PodToday{Name: "agent-1", Revision: "r1", Ready: true}, Change: Replaced, Reason: "new revision",
				Fit: &FitResult{Schedulable: true, Insufficient: []string{"cpu: asks 2, 1 free of 4"}, Preempts: []Victim{{Namespace: "x", Name: "low|pod", Priority: 0}}}},
			{Node: "w2", Today: &PodToday{Name: "agent-2", Revision: "r1", Ready: true}, Change: Unchanged},
		},
		Summary: Summary{Nodes: 2, Replaced: 1, Unchanged: 1, Preempting: 1},
		Rollout: Rollout{Strategy: "managed", Summary: "daemonguard replaces 1 nodes", Estimate: time.Minute, Managed: &rolloutplan.Timeline{
			Order:  "by name",
			Waves:  []rolloutplan.Wave{{At: 0, Step: "1/3: 1", StepIndex: 0, Nodes: []string{"w1"}}, {At: 2 * time.Minute, Step: "3/3: 100%", StepIndex: 2, Nodes: []string{"w2"}}},
			Pauses: []rolloutplan.PauseStep{{At: time.Minute, Step: "2/3: pause:1m", StepIndex: 1, Duration: time.Minute}},
		}},
	}
	plan.Analysis = &AnalysisCheck{Ran: true, Revision: "r1", Nodes: []string{"w1", "w2", "w3", "w4", "w5"}, OtherRevisions: 1, Prometheus: "http://prom:9090", Gates: []GateCheck{
		{Name: "errors", Result: GateFail, Measured: 5, Bound: "max 0.05", OutOfBounds: []OutOfBoundsNode{{"w1", "0.123456"}, {"w2", "+Inf"}, {"w3", "1"}, {"w4", "2"}}},
		{Name: "drops", Result: GateMissing, Measured: 4, Missing: []string{"w5"}, Baseline: BaselineToday, Bound: "max 1 of the baseline median 2 (4 nodes)"},
		{Name: "few", Result: GateMissing, Measured: 1, Missing: []string{"w2", "w3", "w4", "w5"}, Baseline: BaselineRollout, Bound: "max 1"},
		{Name: "slow", Result: GateError, Error: "Prometheus at http://prom:9090 did not answer within 10s (--prometheus-timeout)"},
		{Name: "fine", Result: GatePass, Measured: 5, Bound: "max 1"},
	}}
	reports := []Report{{Source: "ds.yaml#1", Namespace: "default", Name: "agent", Plan: plan,
		Admission: AdmissionReport{Injection: "webhook", Validation: "webhook", Mutated: true, Allowed: true, Policies: "built-in policies",
			Violations: []policy.Violation{{Policy: "budget", Action: policy.Warn, Message: "wide"}}}}}

	var table bytes.Buffer
	if err := Render(&table, "table", reports); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	for _, want := range []string{"injection webhook (injects)", "policies: built-in policies", "WARN", "w1", "does not fit: cpu", "preempts x/low|pod (priority 0)", "estimate: 1m0s"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, want := range []string{
		"  analysis check: each gate's query run once against revision r1 on the 5 nodes that run it (Prometheus http://prom:9090); 1 node running another revision left out:\n",
		"    gate errors: WOULD FAIL: 4 of 5 nodes out of bounds already (max 0.05): w1=0.1235, w2=+Inf, w3=1 and 1 more\n",
		"    gate drops: NO SERIES for 1 of 5 nodes: w5; the rollout would pause (inconclusive) until they have one; the other 4 within bounds (max 1 of the baseline median 2 (4 nodes), the nodes measured today as the baseline)\n",
		"    gate few: NO SERIES for 4 of 5 nodes: w2, w3, w4 and 1 more; the rollout would pause (inconclusive) until they have one; a baseline gate: with 1 of 5 nodes measured there is no median to judge them by; the rollout judges it against old-revision nodes, and only missing series are checked here\n",
		"    gate slow: NO ANSWER from Prometheus: Prometheus at http://prom:9090 did not answer within 10s (--prometheus-timeout); the rollout would pause (inconclusive) until it answers\n",
		"    gate fine: passes: 5 of 5 nodes within bounds (max 1)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "w2 ") {
		t.Errorf("the table lists an unchanged node:\n%s", out)
	}
	wave, pause, last := strings.Index(out, "step 1/3"), strings.Index(out, "pauses 1m0s"), strings.Index(out, "step 3/3")
	if wave < 0 || pause < wave || last < pause {
		t.Errorf("waves and pauses are not in time order:\n%s", out)
	}

	var md bytes.Buffer
	if err := Render(&md, "markdown", reports); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| w1 |") || !strings.Contains(md.String(), `low\|pod`) {
		t.Errorf("markdown lacks the node row or does not escape a pipe:\n%s", md.String())
	}
	if !strings.Contains(md.String(), "\n\nanalysis check: each gate's query") || !strings.Contains(md.String(), "\n- gate errors: WOULD FAIL: 4 of 5 nodes") {
		t.Errorf("markdown lacks the analysis check as a list of gates:\n%s", md.String())
	}

	var js bytes.Buffer
	if err := Render(&js, "json", reports); err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Items    []Report `json:"items"`
		ExitCode int      `json:"exitCode"`
	}
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded.ExitCode != exitPlanNotFit || len(decoded.Items) != 1 || len(decoded.Items[0].Plan.Nodes) != 2 {
		t.Errorf("json = %s", js.String())
	}
	if got := decoded.Items[0].Plan.Analysis; got == nil || !reflect.DeepEqual(*got, *plan.Analysis) {
		t.Errorf("the analysis check does not survive JSON: %+v", got)
	}
}
