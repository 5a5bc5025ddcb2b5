package webhook

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/policy"
)

func builtinSet(t *testing.T) *policy.Set {
	t.Helper()
	return testHandlers(t).Engine.Set()
}

// factsNodes returns n nodes with resourceVersion rv, node 0 a tainted control-plane node.
func factsNodes(n int, rv string) []*corev1.Node {
	out := make([]*corev1.Node, n)
	for i := range out {
		out[i] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i), UID: types.UID(fmt.Sprintf("u%d", i)), ResourceVersion: rv}}
	}
	out[0].Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	return out
}

// cacheHandlers serves set with the cache on or off, over nodes and labels that the test may
// change between requests.
func cacheHandlers(set *policy.Set, noCache bool, nodes *[]*corev1.Node, labels *map[string]string) *Handlers {
	return &Handlers{
		Engine: policy.NewEngine(set), ExemptNamespaces: []string{"kube-system"}, FailureMode: FailClosed, Log: logr.Discard(),
		NoDecisionCache: noCache,
		Facts: Facts{
			NamespaceLabels: func(context.Context, string) (map[string]string, error) { return *labels, nil },
			Nodes:           func(context.Context) ([]*corev1.Node, error) { return *nodes, nil },
		},
	}
}

// answer is what an AdmissionReview response says, for comparing cached and evaluated answers.
type answer struct {
	Allowed  bool
	Code     int32
	Message  string
	Warnings []string
	Patch    string
}

func answerOf(t *testing.T, path string, h *Handlers, body string) answer {
	t.Helper()
	code, resp := serve(endpoints(h)[path], []byte(body))
	if resp == nil {
		t.Fatalf("HTTP %d without a response", code)
	}
	a := answer{Allowed: resp.Allowed, Warnings: resp.Warnings, Patch: string(resp.Patch)}
	if resp.Result != nil {
		a.Code, a.Message = resp.Result.Code, resp.Result.Message
	}
	return a
}

// The cache never changes an answer: every request is answered the same with the cache off, on
// the first time (miss) and on the second (hit).
func TestDecisionCacheAnswersAsEvaluationDoes(t *testing.T) {
	set := builtinSet(t)
	nodes, labels := factsNodes(5, "1"), map[string]string{}
	withStatus := strings.Replace(seedObject, `"name":"nginx-ds",`, `"name":"nginx-ds","annotations":{"status.daemonguard.io/phase":"Rolling"},`, 1)
	requests := map[string]struct{ path, body string }{
		"the seed is mutated":                  {MutateDaemonSetPath, review("apps", "v1", "DaemonSet", "CREATE", seedObject)},
		"the seed is validated":                {ValidateDaemonSetPath, review("apps", "v1", "DaemonSet", "CREATE", seedObject)},
		"a wide budget is denied":              {ValidateDaemonSetPath, review("apps", "v1", "DaemonSet", "CREATE", strings.Replace(seedObject, `"maxUnavailable":1`, `"maxUnavailable":"100%"`, 1))},
		"an integer budget is checked":         {ValidateDaemonSetPath, review("apps", "v1", "DaemonSet", "CREATE", strings.Replace(seedObject, `"maxUnavailable":1`, `"maxUnavailable":4`, 1))},
		"OnDelete draws a warning":             {ValidateDaemonSetPath, review("apps", "v1", "DaemonSet", "CREATE", strings.Replace(seedObject, `{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}`, `{"type":"OnDelete"}`, 1))},
		"an opted-out DaemonSet is left alone": {MutateDaemonSetPath, review("apps", "v1", "DaemonSet", "CREATE", strings.Replace(seedObject, `"name":"nginx-ds",`, `"name":"nginx-ds","labels":{"daemonguard.io/ignore":"true"},`, 1))},
		"a malformed template is an error":     {MutateDaemonSetPath, review("apps", "v1", "DaemonSet", "CREATE", `{"spec":{"template":"x"}}`)},
		"an exempt namespace":                  {MutateDaemonSetPath, strings.Replace(review("apps", "v1", "DaemonSet", "CREATE", seedObject), `"namespace":"default"`, `"namespace":"kube-system"`, 1)},
	}
	update := review("apps", "v1", "DaemonSet", "UPDATE", withStatus)
	update = strings.Replace(update, `"object":`, `"oldObject":`+seedObject+`,"object":`, 1)
	requests["a status-only update"] = struct{ path, body string }{ValidateDaemonSetPath, update}

	uncached := cacheHandlers(set, true, &nodes, &labels)
	cached := cacheHandlers(set, false, &nodes, &labels)
	for name, r := range requests {
		t.Run(name, func(t *testing.T) {
			want := answerOf(t, r.path, uncached, r.body)
			for _, pass := range []string{"miss", "hit"} {
				if got := answerOf(t, r.path, cached, r.body); !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %+v, want %+v", pass, got, want)
				}
			}
		})
	}
	if t.Failed() {
		return
	}
	// maxUnavailable 4 is denied on 5 nodes (4 matching, at most 50%: 2) but allowed on 9 (8
	// matching: 4). After the node list changes, the cached denial must not be reused.
	body := requests["an integer budget is checked"].body
	if a := answerOf(t, ValidateDaemonSetPath, cached, body); a.Allowed {
		t.Fatalf("maxUnavailable 4 allowed on 5 nodes: %+v", a)
	}
	nodes = factsNodes(9, "1")
	if a := answerOf(t, ValidateDaemonSetPath, cached, body); !a.Allowed || !reflect.DeepEqual(a, answerOf(t, ValidateDaemonSetPath, uncached, body)) {
		t.Errorf("after the node list grew: %+v", a)
	}
}

// What a decision depends on is in the key; what makes reuse unsafe turns the cache off.
func TestDecisionCacheKeys(t *testing.T) {
	set := builtinSet(t)
	nodes, labels := factsNodes(3, "1"), map[string]string{"team": "a"}
	h := cacheHandlers(set, false, &nodes, &labels)
	req := func(op admissionv1.Operation, obj string) admissionRequest {
		return admissionRequest{Operation: op, Namespace: "default", Object: obj}
	}
	base := req(admissionv1.Create, seedObject)
	key := func(r admissionRequest, needNodes bool) *cacheKey {
		ar := r.request()
		return h.cacheKey(set, "w", ar, h.gather(context.Background(), ar, needNodes), needNodes)
	}
	k0 := key(base, true)
	if k0 == nil {
		t.Fatal("no key for a cacheable request")
	}
	differs := map[string]func() *cacheKey{
		"another object": func() *cacheKey {
			return key(req(admissionv1.Create, strings.Replace(seedObject, "1.7.9", "1.7.10", 1)), true)
		},
		"another operation": func() *cacheKey { return key(req(admissionv1.Update, seedObject), true) },
		"an old object":     func() *cacheKey { r := base; r.OldObject = seedObject; return key(r, true) },
		"another namespace": func() *cacheKey { r := base; r.Namespace = "other"; return key(r, true) },
		"no node facts":     func() *cacheKey { return key(base, false) },
		"a changed node": func() *cacheKey {
			nodes[1].ResourceVersion = "2"
			defer func() { nodes[1].ResourceVersion = "1" }()
			return key(base, true)
		},
		"other labels": func() *cacheKey {
			labels["team"] = "b"
			defer func() { labels["team"] = "a" }()
			return key(base, true)
		},
		"an unreadable list": func() *cacheKey {
			h.Facts.Nodes = failingNodes
			defer func() { h.Facts.Nodes = listNodes(&nodes) }()
			return key(base, true)
		},
		"labels that concatenate alike": func() *cacheKey {
			labels = map[string]string{"tea": "ma"}
			defer func() { labels = map[string]string{"team": "a"} }()
			return key(base, true)
		},
	}
	for name, f := range differs {
		if k := f(); k == nil || k.equal(k0) {
			t.Errorf("%s: key %v equals the base key", name, k)
		}
	}
	if k := key(base, true); k == nil || !k.equal(k0) {
		t.Error("the same request gave another key")
	}
	nodes[2].ResourceVersion = ""
	if k := key(base, true); k != nil {
		t.Error("a node without resourceVersion must make the request uncacheable")
	}
	nodes[2].ResourceVersion = "1"

	clock, err := policy.Compile(context.Background(), []policy.Module{{Name: "clock.rego", Source: `package daemonguard.policies.clock

violation contains {"field": "metadata.name", "msg": "odd second"} if {
	(time.now_ns() / 1000000000) % 2 == 1
}
`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if clock.Deterministic() || !set.Deterministic() {
		t.Fatalf("Deterministic: clock %v, built-in %v", clock.Deterministic(), set.Deterministic())
	}
	if k := (&Handlers{}).cacheKey(clock, "w", base.request(), clusterFacts{nodesErr: errNodesNotRead}, false); k != nil {
		t.Error("a set calling time.now_ns must not be cached")
	}
}

func failingNodes(context.Context) ([]*corev1.Node, error) { return nil, fmt.Errorf("no cache") }

func listNodes(nodes *[]*corev1.Node) func(context.Context) ([]*corev1.Node, error) {
	return func(context.Context) ([]*corev1.Node, error) { return *nodes, nil }
}

// Evaluation errors are never cached: each request goes through the failure mode again.
func TestDecisionCacheKeepsNoErrors(t *testing.T) {
	set := explodingSet(t)
	nodes, labels := factsNodes(1, "1"), map[string]string{}
	h := cacheHandlers(set, false, &nodes, &labels)
	body := review("apps", "v1", "DaemonSet", "CREATE", seedObject)
	for range 2 {
		if a := answerOf(t, ValidateDaemonSetPath, h, body); a.Allowed || !strings.Contains(a.Message, "could not evaluate") {
			t.Fatalf("answer %+v, want a denial naming the evaluation error", a)
		}
	}
	if len(h.cache.current) != 0 {
		t.Errorf("an error was cached: %d entries", len(h.cache.current))
	}
}

// A new policy set in force empties the cache: nothing decided under the old set is reused.
func TestDecisionCacheFollowsTheSetInForce(t *testing.T) {
	nodes, labels := factsNodes(5, "1"), map[string]string{}
	h := cacheHandlers(builtinSet(t), false, &nodes, &labels)
	body := review("apps", "v1", "DaemonSet", "CREATE", seedObject)
	if a := answerOf(t, ValidateDaemonSetPath, h, body); !a.Allowed {
		t.Fatalf("the seed is denied: %+v", a)
	}
	strict, err := policy.Compile(context.Background(), []policy.Module{{Name: "no_seed.rego", Source: `package daemonguard.policies.no_seed

violation contains {"field": "metadata.name", "msg": "no seeds"} if input.object.metadata.name == "nginx-ds"
`}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Engine.Swap(strict)
	if a := answerOf(t, ValidateDaemonSetPath, h, body); a.Allowed {
		t.Errorf("the old set's answer was reused: %+v", a)
	}
}

// Eviction keeps the cache bounded.
func TestDecisionCacheIsBounded(t *testing.T) {
	var c decisionCache
	set := builtinSet(t)
	obj := []byte(strings.Repeat("x", 64<<10))
	for i := range 1000 {
		k := &cacheKey{webhook: "w", operation: "CREATE", namespace: fmt.Sprint(i), object: obj}
		c.put(set, k, i)
	}
	total := 0
	for _, m := range []map[uint64][]*cacheEntry{c.current, c.previous} {
		for _, es := range m {
			for _, e := range es {
				total += e.key.size()
			}
		}
	}
	if total > 2*generationBytes {
		t.Errorf("cache holds %d bytes of keys, more than %d", total, 2*generationBytes)
	}
	if v, ok := c.get(set, &cacheKey{webhook: "w", operation: "CREATE", namespace: "999", object: obj}); !ok || v != 999 {
		t.Errorf("the newest entry is gone: %v, %v", v, ok)
	}
}

// admissionRequest builds admission requests for key tests.
type admissionRequest struct {
	Operation         admissionv1.Operation
	Namespace         string
	Object, OldObject string
}

func (r admissionRequest) request() admission.Request {
	ar := admission.Request{}
	ar.Operation, ar.Namespace = r.Operation, r.Namespace
	ar.Object.Raw = []byte(r.Object)
	if r.OldObject != "" {
		ar.OldObject.Raw = []byte(r.OldObject)
	}
	ar.Kind = metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"}
	return ar
}
