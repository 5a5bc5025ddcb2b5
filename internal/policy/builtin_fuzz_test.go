package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// The bounds FuzzBuiltinPolicies holds the built-in policies to, whatever a tenant writes in a
// DaemonSet's daemonguard.io/ annotations or its pod template: the output of one evaluation is
// capped by the policies themselves (a few violations per rule, quoted values cut by lib.quote),
// never by the size of the input, so a review's answer and the memory that builds it stay small.
const (
	// fuzzMaxValueBytes is the largest generated value: a quarter of the API server's 256 KiB
	// limit on all annotations together, and past what a replica survived before the caps (a
	// 20 KB steps value took 3.4 GiB).
	fuzzMaxValueBytes = 64 << 10
	// fuzzMaxMessageBytes bounds the bytes of all violations' fields and messages together.
	fuzzMaxMessageBytes = 32 << 10
	// fuzzMaxViolations bounds the number of violations of one evaluation.
	fuzzMaxViolations = 64
	// fuzzDeadline bounds one object's evaluations (inject, then validate as a CREATE and
	// offline). Generous on purpose: the bound on the output is the point, the deadline only
	// turns a hang into a failure; the seeds each take well under a second.
	fuzzDeadline = 10 * time.Second
)

// fuzzTargets are where a generated value goes: a daemonguard.io/ annotation, or a list of the
// pod template (each element the value decoded as JSON, or the value as a string).
var fuzzTargets = []string{
	"daemonguard.io/steps",
	"daemonguard.io/analysis",
	"daemonguard.io/topology-key",
	"daemonguard.io/progress-deadline",
	"daemonguard.io/max-unavailable",
	"daemonguard.io/resume",
	"daemonguard.io/on-delete-exempt",
	"daemonguard.io/rollout",
	"daemonguard.io/paused",
	"daemonguard.io/inject",
	"daemonguard.io/on-analysis-failure",
	"daemonguard.io/no-such-annotation",
	"keys:daemonguard.io/typo-", // the value is repeated as many unknown daemonguard.io/ keys
	"list:tolerations",
	"list:containers",
	"field:priorityClassName",
}

// fuzzSet is the built-in policy set, compiled once as the webhook compiles it.
var fuzzSet = sync.OnceValues(func() (*Set, error) { return CompileDirs(context.Background(), nil) })

// FuzzBuiltinPolicies evaluates the built-in policies, as admission does, on DaemonSets whose
// daemonguard.io/ annotations (or pod template lists) are built from the fuzzer's bytes: a
// prefix, then unit repeated times times (cut at fuzzMaxValueBytes), so short inputs make long
// values. It fails when the violations exceed fuzzMaxViolations or fuzzMaxMessageBytes, or the
// evaluation does not end within fuzzDeadline. The seeds are the worst cases found so far; they
// run as a plain test in `go test`.
func FuzzBuiltinPolicies(f *testing.F) {
	gate := "- {name: errors, query: 'sum(x{node=~\"{{ nodes }}\"})', max: 1}\n"
	seeds := []struct {
		target uint8
		prefix string
		unit   string
		times  uint16
	}{
		{0, "1", ",", 2000},        // 2,000 empty steps: 2,000 violations of 2 KB, 4 MB, before the caps
		{0, "1", ",", 20000},       // 20,000 empty steps: 20,000 violations quoting 20 KB each before the caps
		{0, "1", ",", 60000},       // 60,000 commas: past 21 GB before the caps
		{0, "", "0,", 10000},       // every step invalid, none empty
		{0, "", "x", 60000},        // one step of 60,000 characters
		{0, "9999,", "1,", 8000},   // every count step smaller than the first
		{0, "100%,", "99%,", 5000}, // every percent step smaller than the first
		{0, "", "pause:1h,", 7000}, // never ends at 100%, quoting the value in its example
		{1, "", gate, 10000},       // as many gates as 64 KiB holds (about 1,000), one name
		{1, "", "- {name: " + strings.Repeat("a", 100) + ", query: q, bogus: 1, min: 2, max: 1}\n", 600},
		{1, "", "- 1\n", 4000},                                    // 4,000 entries that are not gates
		{1, "- {name: x, min: 1, query: '", "{{ evil }}", 6000},   // 6,000 unknown placeholders
		{1, "", "- {name: x, min: 1, query: '{{ nodes }}', ", 10}, // invalid YAML
		{1, "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: [", "*d,", 2000}, // aliases
		{2, "", "a", 60000},
		{3, "", "1s", 2000},
		{4, "", "9", 60000},
		{5, "", "r", 60000},
		{6, "", " ", 60000},
		{11, "", "z", 60000},
		{12, "", "x", 5000}, // 5,000 unknown daemonguard.io/ annotations
		{13, "", `{"operator":"Exists"}`, 5000},
		{13, "", `{"key":"node-role.kubernetes.io/control-plane","operator":"Exists"}`, 3000},
		{14, "", `{"name":"c","ports":[{"hostPort":80}]}`, 3000},
		{15, "", "system-node-critical-", 5000},
	}
	for _, s := range seeds {
		f.Add(s.target, s.prefix, s.unit, s.times)
	}
	set, err := fuzzSet()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target uint8, prefix, unit string, times uint16) {
		obj := fuzzDaemonSet(fuzzTargets[int(target)%len(fuzzTargets)], fuzzValue(prefix, unit, int(times)))
		checkBounded(t, set, obj)
	})
}

// fuzzValue is prefix and unit repeated times times, cut at fuzzMaxValueBytes.
func fuzzValue(prefix, unit string, times int) string {
	if len(unit) > 0 && times > (fuzzMaxValueBytes-len(prefix))/len(unit)+1 {
		times = (fuzzMaxValueBytes-len(prefix))/len(unit) + 1
	}
	v := prefix + strings.Repeat(unit, max(times, 0))
	if len(v) > fuzzMaxValueBytes {
		v = v[:fuzzMaxValueBytes]
	}
	return v
}

// fuzzDaemonSet is a compliant DaemonSet with value put where target says.
func fuzzDaemonSet(target, value string) map[string]any {
	annotations := map[string]any{}
	podSpec := map[string]any{"containers": []any{map[string]any{"name": "agent", "image": "agent:1"}}}
	switch {
	case strings.HasPrefix(target, "keys:"):
		// One unknown key per chunk of the value, each a valid annotation key.
		prefix := strings.TrimPrefix(target, "keys:")
		for i := 0; i*8 < len(value); i++ {
			annotations[fmt.Sprintf("%s%d", prefix, i)] = value[i*8 : min(len(value), i*8+8)]
		}
	case strings.HasPrefix(target, "list:"):
		podSpec[strings.TrimPrefix(target, "list:")] = fuzzList(value)
	case strings.HasPrefix(target, "field:"):
		podSpec[strings.TrimPrefix(target, "field:")] = value
	default:
		annotations[target] = value
	}
	return map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "DaemonSet",
		"metadata":   map[string]any{"name": "agent", "namespace": "team-a", "annotations": annotations},
		"spec": map[string]any{
			"selector":             map[string]any{"matchLabels": map[string]any{"app": "agent"}},
			"revisionHistoryLimit": json.Number("10"),
			// Surging, so that containers with host ports are a violation that lists them.
			"updateStrategy": map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxUnavailable": json.Number("0"), "maxSurge": json.Number("1")}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "agent"}},
				"spec":     podSpec,
			},
		},
	}
}

// fuzzList reads value as a JSON array's elements (`{...}{...}` or `{...},{...}`); a value that
// is not is one string element per 64 bytes.
func fuzzList(value string) []any {
	var out []any
	dec := json.NewDecoder(strings.NewReader(strings.ReplaceAll(value, "},{", "} {")))
	dec.UseNumber()
	for {
		var v any
		if err := dec.Decode(&v); err != nil {
			break
		}
		out = append(out, v)
	}
	if len(out) > 0 {
		return out
	}
	for i := 0; i < len(value); i += 64 {
		out = append(out, value[i:min(len(value), i+64)])
	}
	return out
}

// checkBounded evaluates obj as admission does, in an unmarked namespace (injection skipped, as
// admission skips it there) and in a marked one, and offline, and fails past the bounds.
func checkBounded(t *testing.T, set *Set, obj map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fuzzDeadline)
	defer cancel()
	facts := &ClusterFacts{Nodes: 5, MatchingNodes: 5}
	inputs := map[string]*Input{
		"CREATE in an unmarked namespace": {Operation: OpCreate, Object: obj, Namespace: Namespace{Name: "team-a", Labels: map[string]string{}}, Cluster: facts},
		"CREATE in a marked namespace":    {Operation: OpCreate, Object: obj, Namespace: Namespace{Name: "agents", Labels: map[string]string{"daemonguard.io/node-agents": "true"}}, Cluster: facts},
		"CHECK offline":                   {Operation: OpCheck, Object: obj, Namespace: Namespace{Name: "team-a", Labels: map[string]string{}}},
	}
	start := time.Now()
	for name, in := range inputs {
		if in.Namespace.Labels["daemonguard.io/node-agents"] == "true" {
			if _, err := set.Inject(ctx, in); err != nil {
				t.Fatalf("%s: inject: %v", name, fuzzErr(err, start))
			}
		}
		vs, err := set.Validate(ctx, in)
		if err != nil {
			t.Fatalf("%s: validate: %v", name, fuzzErr(err, start))
		}
		size := 0
		for _, v := range vs {
			size += len(v.Field) + len(v.Message)
		}
		if len(vs) > fuzzMaxViolations || size > fuzzMaxMessageBytes {
			first := vs[0].String()
			if len(first) > 300 {
				first = first[:300] + "..."
			}
			t.Fatalf("%s: %d violations of %d bytes, want at most %d violations of at most %d bytes; the first: %s",
				name, len(vs), size, fuzzMaxViolations, fuzzMaxMessageBytes, first)
		}
	}
}

// fuzzErr says that the deadline stopped an evaluation, when it did.
func fuzzErr(err error, start time.Time) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the evaluation did not end within %s (stopped after %s): %w", fuzzDeadline, time.Since(start).Round(time.Millisecond), err)
	}
	return err
}
