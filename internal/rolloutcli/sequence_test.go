package rolloutcli

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/test/golden"
)

// Snapshot is one observation of a DaemonSet as `rollout status` gets it from its watch: the
// object (trimmed to what Evaluate reads) and the current controller-revision-hash.
type Snapshot struct {
	CurrentRevision string            `json:"currentRevision,omitempty"`
	DaemonSet       *appsv1.DaemonSet `json:"daemonSet"`
}

// TrimSnapshot keeps what Evaluate reads of a DaemonSet: name, namespace, generation, the
// daemonguard annotations, the update strategy and the status.
func TrimSnapshot(ds *appsv1.DaemonSet, currentRevision string) Snapshot {
	t := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace, Generation: ds.Generation}}
	for k, v := range ds.Annotations {
		if strings.HasPrefix(k, "daemonguard.io/") || strings.HasPrefix(k, rolloutapi.StatusPrefix) {
			if t.Annotations == nil {
				t.Annotations = map[string]string{}
			}
			t.Annotations[k] = v
		}
	}
	t.Spec.UpdateStrategy.Type = ds.Spec.UpdateStrategy.Type
	t.Status = ds.Status
	return Snapshot{CurrentRevision: currentRevision, DaemonSet: t}
}

// statusLines is what `rollout status` shows of one snapshot: the message line and the progress
// line a terminal redraws.
func statusLines(s Snapshot) (message, progress string) {
	st := Evaluate(s.DaemonSet, s.CurrentRevision)
	return st.Message, ProgressLine(st, 0)
}

// The lines `rollout status` prints for status sequences recorded from real rollouts on the local
// control plane (TestRecordStatusSequences writes them with RECORD_STATUS=1): a progressive
// rollout with a timed and an indefinite pause, a pause by annotation, a halt on pods that never
// become Ready and its undo, an unmanaged OnDelete DaemonSet and a RollingUpdate one. Golden
// files beside them; UPDATE_GOLDEN=1 rewrites them.
func TestStatusLinesOfRecordedSequences(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "sequences", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded sequences: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			seq := readSequence(t, file)
			var b strings.Builder
			for i, s := range seq {
				msg, line := statusLines(s)
				fmt.Fprintf(&b, "%03d %s\n    %s\n", i, msg, line)
			}
			goldenPath := strings.TrimSuffix(file, ".yaml") + ".golden"
			golden.Assert(t, goldenPath, []byte(b.String()))
		})
	}
}

func readSequence(t *testing.T, file string) []Snapshot {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var seq []Snapshot
	if err := yaml.UnmarshalStrict(data, &seq); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if len(seq) == 0 {
		t.Fatalf("%s: no snapshots", file)
	}
	return seq
}

var (
	stepRef     = regexp.MustCompile(`\bstep (\d+)/(\d+)`)
	fraction    = regexp.MustCompile(`\b(\d+) (?:of|out of) (\d+)\b`)
	progressFig = regexp.MustCompile(`\] (\d+)/(\d+) (nodes )?updated`)
)

// Contradictions lists what a status's lines claim against themselves: a step shown twice with
// different numbers, counts given more than once, more updated than desired, a step index past
// the step count, a finished step on an unfinished count.
func Contradictions(st StatusReport, message, progress string) []string {
	var out []string
	if steps := stepRef.FindAllStringSubmatch(message, -1); len(steps) > 1 {
		out = append(out, fmt.Sprintf("message names %d steps", len(steps)))
	}
	for _, m := range stepRef.FindAllStringSubmatch(message, -1) {
		if i, n := atoi(m[1]), atoi(m[2]); i < 1 || i > n {
			out = append(out, "step "+m[0]+" out of range")
		}
	}
	counts := fraction.FindAllStringSubmatch(message, -1)
	distinct := map[string]bool{}
	for _, c := range counts {
		if atoi(c[1]) > atoi(c[2]) {
			out = append(out, "message counts "+c[0])
		}
		distinct[c[2]] = true
	}
	if len(counts) > 1 && !strings.Contains(message, "not available on") {
		// A halt names how many nodes lack an available pod beside the nodes updated; any other
		// message counts once.
		out = append(out, fmt.Sprintf("message counts %d times: %q", len(counts), counts))
	}
	if len(distinct) > 1 {
		out = append(out, fmt.Sprintf("message counts against different totals: %q", counts))
	}
	m := progressFig.FindStringSubmatch(progress)
	if m == nil {
		return append(out, "progress line without counts: "+progress)
	}
	if atoi(m[1]) > atoi(m[2]) {
		out = append(out, "progress line counts "+m[0])
	}
	if st.StepSpec == "done" && (atoi(m[1]) != atoi(m[2]) || !st.ControllerCounts) {
		out = append(out, "progress line shows the last step done with "+m[0])
	}
	if strings.Contains(progress, "(done)") && (strings.Contains(progress, ", paused") || strings.Contains(progress, ", failed")) {
		out = append(out, "progress line holds a finished rollout: "+progress)
	}
	if st.Step != "" {
		i, n, ok := strings.Cut(st.Step, "/")
		if !ok || atoi(i) < 1 || atoi(i) > atoi(n) {
			out = append(out, "progress line step "+st.Step+" out of range")
		}
	}
	return out
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// Property: no line of any recorded snapshot contradicts itself, nor does any snapshot torn
// between the controller's two writes: each recorded snapshot's status annotations combined with
// every other snapshot's conditions of the same sequence.
func TestStatusLinesNeverContradictThemselves(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "sequences", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded sequences: %v", err)
	}
	checked := 0
	for _, file := range files {
		seq := readSequence(t, file)
		for i, a := range seq {
			for j, b := range seq {
				s := Snapshot{CurrentRevision: a.CurrentRevision, DaemonSet: a.DaemonSet.DeepCopy()}
				s.DaemonSet.Status.Conditions = b.DaemonSet.Status.Conditions
				st := Evaluate(s.DaemonSet, s.CurrentRevision)
				progress := ProgressLine(st, 0)
				if bad := Contradictions(st, st.Message, progress); len(bad) > 0 {
					t.Errorf("%s: annotations of #%d with conditions of #%d: %v\n  %s\n  %s", filepath.Base(file), i, j, bad, st.Message, progress)
				}
				checked++
			}
		}
	}
	t.Logf("%d snapshots checked", checked)
}

// The property check itself catches the lines the issue reported.
func TestContradictionsFindsTheReportedLines(t *testing.T) {
	tests := map[string]struct {
		st       StatusReport
		message  string
		progress string
	}{
		"counts twice from two sources": {
			st:       StatusReport{Step: "3/3", StepSpec: "done", ControllerCounts: true, Updated: 5, Desired: 5},
			message:  `Waiting for daemon set "node-agent" rollout to finish at step 3/3 (done): 5 of 5 pods updated (1 of 5 nodes updated, 1 unavailable of budget 1)...`,
			progress: "[####################] 5/5 nodes updated, step 3/3 (done)",
		},
		"the step shown is not the step reported": {
			st:       StatusReport{Step: "3/3", StepSpec: "100%", ControllerCounts: true, Updated: 1, Desired: 5},
			message:  `rollout of daemon set "node-agent" is paused at step 3/3 (100%): TimedPause: step 2/3: pause:3s: waiting 1s more; 1 of 5 nodes updated`,
			progress: "[####----------------] 1/5 nodes updated, step 3/3 (100%), paused",
		},
		"more updated than desired": {
			st:       StatusReport{Updated: 6, Desired: 5},
			message:  "rolling",
			progress: "[####################] 6/5 updated, 5 available",
		},
		"a finished rollout shown paused": {
			st:       StatusReport{Step: "5/5", StepSpec: "done", ControllerCounts: true, Updated: 5, Desired: 5},
			message:  "rolling",
			progress: "[####################] 5/5 nodes updated, step 5/5 (done), paused",
		},
		"the last step done with nodes left": {
			st:       StatusReport{Step: "3/3", StepSpec: "done", ControllerCounts: true, Updated: 4, Desired: 5},
			message:  "rolling",
			progress: "[################----] 4/5 nodes updated, step 3/3 (done)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if bad := Contradictions(tc.st, tc.message, tc.progress); len(bad) == 0 {
				t.Errorf("no contradiction found in\n  %s\n  %s", tc.message, tc.progress)
			}
		})
	}
}
