package webhook

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/internal/policy"
)

func TestSchedulingKey(t *testing.T) {
	ds := func(podSpec string) string {
		return `{"metadata":{"name":"x"},"spec":{"template":{"metadata":{},"spec":` + podSpec + `}}}`
	}
	tests := []struct {
		name, raw string
		want      string // "" when no key
	}{
		{"all three", ds(`{"nodeSelector":{"a":"b"},"affinity":{},"tolerations":[1],"containers":[]}`), `9:{"a":"b"}2:{}3:[1]`},
		{"none", ds(`{"containers":[]}`), `---`},
		{"null is a value", ds(`{"affinity":null}`), `-4:null-`},
		{"white space around values is not part of them", ds(`{ "tolerations" : [ 1 ] }`), `--5:[ 1 ]`},
		{"a repeated key: the last, as decoding keeps", ds(`{"tolerations":[1],"tolerations":[2]}`), `--3:[2]`},
		{"an escaped key may spell one", ds(`{"toler\u0061tions":[1]}`), ""},
		{"pod spec not an object", ds(`null`), ""},
		{"no template", `{"spec":{}}`, ""},
		{"spec not an object", `{"spec":[]}`, ""},
		{"not an object", `[]`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := schedulingKey([]byte(tt.raw))
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("schedulingKey(%s) = %q, %v; want %q", tt.raw, got, ok, tt.want)
			}
		})
	}
}

// The memo's memory is bounded by its keys' bytes, and huge keys are not kept.
func TestNodeFactsMemoIsBounded(t *testing.T) {
	var m nodeFactsMemo
	facts := policy.ClusterFacts{Nodes: 3, MatchingNodes: 2}
	m.put(1, strings.Repeat("x", maxNodeFactKeyBytes+1), facts)
	if len(m.facts) != 0 {
		t.Fatal("a key over the size limit was kept")
	}
	key := strings.Repeat("y", maxNodeFactKeyBytes-10)
	for i := range 3 * maxNodeFactsBytes / maxNodeFactKeyBytes {
		m.put(1, key+fmt.Sprint(i), facts)
		if m.bytes > maxNodeFactsBytes {
			t.Fatalf("after %d keys the memo holds %d bytes of keys, more than %d", i+1, m.bytes, maxNodeFactsBytes)
		}
	}
	last := key + fmt.Sprint(3*maxNodeFactsBytes/maxNodeFactKeyBytes-1)
	if got, ok := m.get(1, last); !ok || got != facts {
		t.Errorf("the newest key is gone: %v, %v", got, ok)
	}
	if _, ok := m.get(2, last); ok {
		t.Error("answered for another generation")
	}
}

// The node facts memo never changes an answer: validations of DaemonSets with many scheduling
// variants, each object new (the decision cache misses), in random order and across node list
// generations, are answered as without the memo, and nodes are listed only for new templates.
func TestNodeFactsMemoAnswersAsWithout(t *testing.T) {
	set := builtinSet(t)
	nodes, labels := factsNodes(5, "1"), map[string]string{}
	gen := NewNodeGeneration(nil)
	remembering := cacheHandlers(set, true, &nodes, &labels)
	remembering.Facts.NodesGeneration = gen.Get
	lists := 0
	remembering.Facts.Nodes = func(context.Context) ([]*corev1.Node, error) { lists++; return nodes, nil }
	plain := cacheHandlers(set, true, &nodes, &labels)
	plain.NoNodeFactsMemo = true

	controlPlane := `{"key":"node-role.kubernetes.io/control-plane","operator":"Exists","effect":"NoSchedule"}`
	variants := []string{
		`"tolerations":[{"key":"node-role.kubernetes.io/master","effect":"NoSchedule"}]`,
		`"tolerations":[` + controlPlane + `]`,
		`"tolerations" : [ ` + controlPlane + ` ]`,
		`"tolerations":[],"tolerations":[` + controlPlane + `]`,
		`"toler\u0061tions":[` + controlPlane + `]`,
		`"nodeSelector":{"zone":"a"}`,
		`"tolerations":[` + controlPlane + `],"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["n0","n1","n2"]}]}]}}}`,
		`"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["n1","n7"]}]}]}}}`,
		`"hostNetwork":true`,
	}
	object := func(variant string, n int) string {
		return fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"x","namespace":"default","annotations":{"n":"%d"}},`+
			`"spec":{"selector":{"matchLabels":{"app":"x"}},"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":9}},`+
			`"template":{"metadata":{"labels":{"app":"x"}},"spec":{%s,"containers":[{"name":"c","image":"i"}]}}}}`, n, variant)
	}
	r := rand.New(rand.NewPCG(1, 2))
	distinct := map[string]bool{}
	requests := 0
	for round := range 4 {
		if round == 2 { // a node list of another generation: more nodes, so other counts
			nodes = factsNodes(9, "2")
			gen.Added(nodes[8])
		}
		for _, i := range r.Perm(len(variants) * 3) {
			requests++
			body := review("apps", "v1", "DaemonSet", "CREATE", object(variants[i%len(variants)], requests))
			got, want := answerOf(t, ValidateDaemonSetPath, remembering, body), answerOf(t, ValidateDaemonSetPath, plain, body)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d, variant %q:\n with the memo    %+v\n without the memo %+v", round, variants[i%len(variants)], got, want)
			}
			distinct[fmt.Sprint(want.Allowed, want.Message, strings.Join(want.Warnings, "|"))] = true
		}
	}
	// Not vacuous: the variants are answered differently (the count shows in the verdicts), and
	// the memo spared node lists.
	if len(distinct) < 5 {
		t.Errorf("only %d distinct answers over the variants; they do not exercise the node count", len(distinct))
	}
	// Per generation, each distinct set of scheduling fields once (variants 2 and 4 have the same),
	// and the escaped key, which has no memo key, every time it comes (3 times a round).
	wantLists := 2*(len(variants)-2) + 4*3
	if lists != wantLists {
		t.Errorf("%d node lists for %d requests, want %d", lists, requests, wantLists)
	}
}
