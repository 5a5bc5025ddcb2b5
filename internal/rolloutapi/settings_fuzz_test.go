package rolloutapi_test

import (
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// desiredCounts are node counts the parsed budget and steps are resolved against: none, small
// clusters, and the largest a DaemonSet status can report (int32).
var desiredCounts = []int{0, 1, 2, 3, 7, 10, 99, 100, 1000, 5000, math.MaxInt32}

// FuzzParseSettings feeds every settings annotation to ParseSettings, the controller's reader of
// them (go test -fuzz FuzzParseSettings ./internal/rolloutapi/). An empty fuzzed value stands for
// an absent annotation. What it accepts must mean what is written:
//
//   - the budget is the integer or percent written, resolved with the arithmetic of the docs
//     (a percent of the desired nodes rounded up, at least one node);
//   - every step is the trimmed text between commas, with the count, percent or duration that
//     text spells, the last step that is not a pause is 100%, and the steps' texts joined with
//     commas read back as the same steps (Step.Text is what status messages quote);
//   - the deadline is the positive duration written, and survives time.Duration's String;
//   - paused, resume and topology key are the values as written.
//
// An error names the annotation it is about.
func FuzzParseSettings(f *testing.F) {
	// The values of the docs, the fixtures and the tests: docs/rollouts.md, testdata/policies,
	// settings_test.go, and generated step lists (settings_policy_test.go).
	f.Add("10%", "1,pause:5m,25%,pause,100%", "10m", "false", "", "")
	f.Add("1", "1,pause:3s,100%", "2m", "", "", "")
	f.Add("2", "1,pause:10m,10%,pause,25%,100%", "15m", "true", "2026-11-25T10:00:00.123456789Z", "topology.kubernetes.io/zone")
	f.Add("0", "1,50%", "soon", "yes", "t", "not a key")
	f.Add("x%", "pause", "10", "", "", "")
	f.Add("+2", " 1 , pause:5m ,100% ", "1h30m", "", "", "")
	f.Add("999999999", "007,050%,100%", "8760h", "", "", "")
	f.Add("1000000000", "pause:1h30m,pause:1.5h,pause:250ms,pause:1µs,100%", "5s", "", "", "")
	f.Add("100%", "0,100%", "0s", "", "", "")
	f.Add("101%", "101%", "-5m", "", "", "")
	for _, steps := range generatedSteps(rand.New(rand.NewPCG(7, 11)), 20) {
		f.Add("", steps, "", "", "", "")
	}
	f.Fuzz(func(t *testing.T, budget, steps, deadline, paused, resume, topology string) {
		annotations := map[string]string{}
		for key, v := range map[string]string{
			rolloutapi.AnnotationMaxUnavailable: budget, rolloutapi.AnnotationSteps: steps,
			rolloutapi.AnnotationProgressDeadline: deadline, rolloutapi.AnnotationPaused: paused,
			rolloutapi.AnnotationResume: resume, rolloutapi.AnnotationTopologyKey: topology,
		} {
			if v != "" {
				annotations[key] = v
			}
		}
		s, err := rolloutapi.ParseSettings(annotations)
		if err != nil {
			named := false
			for key := range annotations {
				named = named || strings.HasPrefix(err.Error(), key+" ") || strings.HasPrefix(err.Error(), key+":")
			}
			if !named {
				t.Fatalf("error %q names no annotation of %v", err, annotations)
			}
			return
		}
		checkBudget(t, budget, s.MaxUnavailable)
		checkSteps(t, steps, s.Steps)
		wantDeadline := rolloutapi.DefaultProgressDeadline
		if deadline != "" {
			d, err := time.ParseDuration(deadline)
			if err != nil {
				t.Fatalf("deadline %q accepted, yet it is no Go duration: %v", deadline, err)
			}
			wantDeadline = d
		}
		if again, err := time.ParseDuration(s.ProgressDeadline.String()); s.ProgressDeadline != wantDeadline || s.ProgressDeadline <= 0 || err != nil || again != s.ProgressDeadline {
			t.Fatalf("deadline %q read as %v (written back as %q: %v, %v), want the positive %v", deadline, s.ProgressDeadline, s.ProgressDeadline.String(), again, err, wantDeadline)
		}
		if s.Paused != (paused == "true") || s.ResumeToken != resume || s.TopologyKey != topology {
			t.Fatalf("paused %q, resume %q, topology key %q read as %+v", paused, resume, topology, s)
		}
	})
}

// checkBudget holds the budget ParseSettings read from written ("" for the default, 1) to the
// number written, and its resolution to the arithmetic of the docs.
func checkBudget(t *testing.T, written string, got intstr.IntOrString) {
	t.Helper()
	if written == "" {
		written = "1"
	}
	isPercent := strings.HasSuffix(written, "%")
	n, err := strconv.ParseInt(strings.TrimSuffix(written, "%"), 10, 64)
	switch {
	case err != nil:
		t.Fatalf("budget %q accepted, yet it is no integer or percent: %v", written, err)
	case isPercent && (n < 1 || n > 100):
		t.Fatalf("budget %q accepted, a percent outside 1%% to 100%%", written)
	case !isPercent && n < 1:
		t.Fatalf("budget %q accepted, a node count below 1", written)
	case isPercent != (got.Type == intstr.String):
		t.Fatalf("budget %q read as %#v: percent and node count confused", written, got)
	}
	for _, desired := range desiredCounts {
		want := n
		if isPercent {
			want = max(1, (n*int64(desired)+99)/100)
		}
		if r := rolloutapi.ResolveMaxUnavailable(got, desired); int64(r) != want {
			t.Fatalf("budget %q (read as %#v) resolves to %d of %d nodes, want %d", written, got, r, desired, want)
		}
	}
}

// checkSteps holds the steps ParseSteps read to the text written.
func checkSteps(t *testing.T, written string, got []rolloutapi.Step) {
	t.Helper()
	texts := []string{"100%"}
	if strings.TrimSpace(written) != "" {
		texts = strings.Split(written, ",")
	}
	if len(got) != len(texts) {
		t.Fatalf("steps %q read as %d steps, want one per comma-separated text: %+v", written, len(got), got)
	}
	lastNodes := -1
	for i, st := range got {
		text := strings.TrimSpace(texts[i])
		if st.Text != text {
			t.Fatalf("steps %q: step %d text %q, want %q", written, i+1, st.Text, text)
		}
		var ok bool
		switch st.Kind {
		case rolloutapi.StepNodes:
			n, err := strconv.ParseInt(text, 10, 64)
			ok = err == nil && n >= 1 && int64(st.Value) == n
		case rolloutapi.StepPercent:
			n, err := strconv.ParseInt(strings.TrimSuffix(text, "%"), 10, 64)
			ok = err == nil && strings.HasSuffix(text, "%") && n >= 1 && n <= 100 && int64(st.Value) == n
		case rolloutapi.StepPause:
			ok = text == "pause"
		case rolloutapi.StepTimedPause:
			d, err := time.ParseDuration(strings.TrimPrefix(text, "pause:"))
			ok = strings.HasPrefix(text, "pause:") && err == nil && d > 0 && st.Duration == d
		}
		if !ok {
			t.Fatalf("steps %q: step %d %q read as %+v", written, i+1, text, st)
		}
		for _, desired := range desiredCounts {
			if target := st.Target(desired); target < 0 || target > desired || st.IsPause() && target != 0 {
				t.Fatalf("steps %q: step %+v asks for %d of %d nodes", written, st, target, desired)
			}
		}
		if !st.IsPause() {
			lastNodes = i
		}
	}
	if lastNodes < 0 {
		t.Fatalf("steps %q accepted, and no step updates a node", written)
	}
	for _, desired := range desiredCounts {
		if target := got[lastNodes].Target(desired); target != desired {
			t.Fatalf("steps %q: the last step that is not a pause, %q, asks for %d of %d nodes: the rollout would never complete", written, got[lastNodes].Text, target, desired)
		}
	}
	joined := make([]string, len(got))
	for i, st := range got {
		joined[i] = st.Text
	}
	again, err := rolloutapi.ParseSteps(strings.Join(joined, ","))
	if err != nil || !reflect.DeepEqual(again, got) {
		t.Fatalf("steps %q, written back as %q, read as %+v (%v), first read as %+v", written, strings.Join(joined, ","), again, err, got)
	}
}
