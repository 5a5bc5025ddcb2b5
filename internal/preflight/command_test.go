package preflight

import "testing"

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
