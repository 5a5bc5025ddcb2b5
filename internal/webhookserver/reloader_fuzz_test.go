package webhookserver

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/policies"
)

// fuzzEvalTimeout bounds one compile and one evaluation of a fuzzed policy set: Rego can loop
// for as long as it likes (numbers.range), and a set that runs out of time has told the fuzzer
// nothing.
const fuzzEvalTimeout = 10 * time.Second

// FuzzPolicyConfigMap fuzzes what a policy ConfigMap can hold, a Rego module and a
// parameters.yaml, through the reloader's path: the ConfigMap as a policy source over the
// built-ins (compile), the error annotation planned on it (planPolicyErrors), and admission
// with the set (go test -fuzz FuzzPolicyConfigMap ./internal/webhookserver/). Properties:
//
//   - the reload either fails or gives a set, never panics;
//   - a failure names the ConfigMap's file (configmap/NAME/KEY), so that the reloader blames it
//     and no other, and the annotation written on it is one line of bounded length;
//   - a set holds the ConfigMap's module, and admission of the fixture DaemonSets with it
//     ends in a verdict or an evaluation error (which the failure mode decides), never in a
//     patch that makes a well-formed DaemonSet malformed, and with known enforcement actions.
func FuzzPolicyConfigMap(f *testing.F) {
	r := newTestReloader(f)
	builtinParams, err := fs.ReadFile(policies.Files, "parameters.yaml")
	if err != nil {
		f.Fatal(err)
	}
	// The built-in policies with their parameters, as a ConfigMap that replaces them would hold.
	for _, m := range r.builtin {
		f.Add(m.Source, string(builtinParams))
	}
	// The example site policy of `daemonguard check --policies`, the policy ConfigMaps of the
	// Argo CD fixtures, and the broken Rego of the reloader's tests.
	extra := filepath.Join("..", "cli", "testdata", "extra-policies")
	f.Add(readFile(f, filepath.Join(extra, "pinned_registry.rego")), readFile(f, filepath.Join(extra, "parameters.yaml")))
	cmFiles, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "argocd", "repo", "daemonguard", "policies", "*.yaml"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "argocd", "configmaps", "policy-*.yaml"))
	for _, file := range append(cmFiles, more...) {
		var cm corev1.ConfigMap
		if err := yaml.Unmarshal([]byte(readFile(f, file)), &cm); err != nil {
			f.Fatalf("%s: %v", file, err)
		}
		for key, v := range cm.Data {
			if strings.HasSuffix(key, ".rego") {
				f.Add(v, cm.Data["parameters.yaml"])
			}
		}
	}
	f.Add(goodRego, "enforcement: {no_latest: warn}\n")
	f.Add(parseErrorRego, "enforcement: [unclosed\n")
	f.Add(unsafeVarsRego, "policies: {rolling_update_budget: {default: {maxUnavailablePercent: 100}}}\n")
	f.Add("package daemonguard.lib\n\nx := 1\n", "inject: {enabled: false}\n")
	f.Add("package daemonguard.inject\n\ndecision := {\"inject\": false, \"reason\": \"replaced\"}\n", "")
	f.Add("package daemonguard.parameters.inject.namespaceClasses\n\nsystem := {\"enabled\": false}\n", "namespaceClasses: []\n")

	fixtures := map[string][]byte{}
	for _, name := range []string{"allowed/managed-rollout.yaml", "allowed/nginx-ds.yaml", "denied/bad-annotation-values.yaml"} {
		raw, err := yaml.YAMLToJSON([]byte(readFile(f, filepath.Join("..", "..", "testdata", "policies", name))))
		if err != nil {
			f.Fatal(err)
		}
		fixtures[name] = raw
	}
	// Admission as in a cluster of a tainted control-plane node and a worker, both namespaces
	// marked for node agents, so that the inject policy is asked and its patch applied.
	adm := &admission.Reviewer{Lookups: admission.Lookups{
		NamespaceLabels: func(context.Context, string) (map[string]string, error) {
			return map[string]string{admission.NodeAgentsLabel: "true"}, nil
		},
		Nodes: func(context.Context) ([]*corev1.Node, error) {
			return []*corev1.Node{
				{ObjectMeta: metav1.ObjectMeta{Name: "control-plane", Labels: map[string]string{"node-role.kubernetes.io/control-plane": ""}},
					Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "worker", Labels: map[string]string{"kubernetes.io/os": "linux"}}},
			}, nil
		},
	}}
	// With the built-ins alone, a fixture is patched and one is denied, or the target would
	// prove nothing about the paths a fuzzed set takes.
	builtinSet, err := policy.Compile(context.Background(), r.builtin, r.builtinParams)
	if err != nil {
		f.Fatal(err)
	}
	patched, denied := false, false
	for _, raw := range fixtures {
		res := adm.Simulate(context.Background(), builtinSet, admission.Review{Operation: policy.OpCreate, Namespace: "apps", Object: raw})
		patched = patched || len(res.Patch) > 0
		denied = denied || len(res.Verdict.Denials) > 0
	}
	if !patched || !denied {
		f.Fatalf("with the built-in policies the fixtures are patched: %v, denied: %v; want both", patched, denied)
	}
	f.Fuzz(func(t *testing.T, rego, params string) {
		ctx, cancel := context.WithTimeout(context.Background(), fuzzEvalTimeout)
		defer cancel()
		cm := policyConfigMap("fuzz", withFile("fuzz.rego", rego), withFile("parameters.yaml", params))
		cms := []corev1.ConfigMap{cm}
		_, _, set, err := r.compile(ctx, cms)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if !strings.Contains(err.Error(), "configmap/fuzz/") {
				t.Fatalf("reload error names no file of the ConfigMap: %v", err)
			}
			writes := planPolicyErrors(cms, err)
			if len(writes) != 1 || writes[0].ConfigMap != "fuzz" || writes[0].Value == "" {
				t.Fatalf("reload error %q plans annotation writes %+v, want one on the ConfigMap", err, writes)
			}
			v := writes[0].Value
			if strings.Contains(v, "\n") || !utf8.ValidString(v) || len(v) > maxPolicyErrorLen+200 {
				t.Fatalf("annotation value %q is not one line of valid UTF-8 of at most %d bytes", v, maxPolicyErrorLen+200)
			}
			return
		}
		if set == nil {
			t.Fatal("the reload gave neither a set nor an error")
		}
		if !slices.Contains(set.Modules(), "configmap/fuzz/fuzz.rego") {
			t.Fatalf("the set's modules %v lack the ConfigMap's", set.Modules())
		}
		for name, raw := range fixtures {
			for _, ns := range []string{"apps", "kube-system"} {
				res := adm.Simulate(ctx, set, admission.Review{Operation: policy.OpCreate, Namespace: ns, Object: raw})
				if ctx.Err() != nil {
					return
				}
				if res.Malformed != nil {
					t.Fatalf("%s in %s: the set made it malformed: %v (patch %v)", name, ns, res.Malformed, res.Patch)
				}
				for _, v := range res.Violations {
					if v.Action != policy.Deny && v.Action != policy.Warn && v.Action != policy.DryRun {
						t.Fatalf("%s in %s: violation %v has action %q", name, ns, v, v.Action)
					}
				}
			}
		}
	})
}

func readFile(t testing.TB, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
