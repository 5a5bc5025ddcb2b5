package webhookserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

type configMapOption func(*corev1.ConfigMap)

func withFile(key, content string) configMapOption {
	return func(cm *corev1.ConfigMap) { cm.Data[key] = content }
}

func withPolicyError(value string) configMapOption {
	return func(cm *corev1.ConfigMap) { cm.Annotations[admission.PolicyErrorAnnotation] = value }
}

func policyConfigMap(name string, opts ...configMapOption) corev1.ConfigMap {
	cm := corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "daemonguard", ResourceVersion: "7",
			Labels: map[string]string{admission.PolicyConfigMapLabel: "true"}, Annotations: map[string]string{}},
		Data: map[string]string{},
	}
	for _, o := range opts {
		o(&cm)
	}
	return cm
}

const (
	goodRego = "package daemonguard.policies.no_latest\n\nviolation contains {\"field\": \"x\", \"msg\": \"m\"} if {\n\tinput.object.kind == \"x\"\n}\n"
	// The parser stops at the brace on line 5 that ends the incomplete assignment.
	parseErrorRego = "package daemonguard.policies.broken\n\nviolation contains x if {\n  x := \n}\n"
	// It would POST the whole admission input to a listener, were http.send allowed.
	httpSendRego = "package daemonguard.policies.exfil\n\nviolation contains {\"field\": \"x\", \"msg\": \"m\"} if {\n\thttp.send({\"method\": \"POST\", \"url\": \"http://127.0.0.1:9/\", \"body\": input}).status_code == 0\n}\n"
	// y is unsafe on line 3 and z on line 7.
	unsafeVarsRego = "package daemonguard.policies.unsafe\n\nviolation contains y if {\n\ttrue\n}\n\nviolation contains z if {\n\ttrue\n}\n"
)

func newTestReloader(t testing.TB) *policyReloader {
	t.Helper()
	builtin, params, err := policy.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	return &policyReloader{builtin: builtin, builtinParams: params, compileOverlay: policy.DefaultLimits.CompileOverlay}
}

func TestPlanPolicyErrors(t *testing.T) {
	long := errors.New("prepare validation query: " + strings.Repeat("é", 2000))
	cases := map[string]struct {
		cms []corev1.ConfigMap
		// err is the reload's error; with compile set it is the one compiling cms gives instead.
		err     error
		compile bool
		// want maps the ConfigMaps to be written to substrings of the new value, or to nil for a
		// removal; ConfigMaps not listed must not be written.
		want map[string][]string
	}{
		"a parse error is recorded on its ConfigMap with file and line, the valid one is left alone": {
			cms:     []corev1.ConfigMap{policyConfigMap("no-latest", withFile("no_latest.rego", goodRego)), policyConfigMap("broken", withFile("broken.rego", parseErrorRego))},
			compile: true,
			want: map[string][]string{"broken": {"configmap/broken/broken.rego:5: rego_parse_error: ",
				"; data sha256:", " rejected, the last good policy set keeps serving"}},
		},
		"compile errors give the first with its line and a count of the rest": {
			cms:     []corev1.ConfigMap{policyConfigMap("unsafe", withFile("unsafe.rego", unsafeVarsRego))},
			compile: true,
			want:    map[string][]string{"unsafe": {"configmap/unsafe/unsafe.rego:3: rego_unsafe_var_error: var y is unsafe", "(and 1 more in this ConfigMap)"}},
		},
		"a broken parameters.yaml is blamed on its ConfigMap by its error's first line": {
			cms:     []corev1.ConfigMap{policyConfigMap("params", withFile("parameters.yaml", "enforcement: [unclosed\n"))},
			compile: true,
			want:    map[string][]string{"params": {"parse configmap/params/parameters.yaml: "}},
		},
		"an error naming no ConfigMap is recorded on every policy ConfigMap": {
			cms: []corev1.ConfigMap{policyConfigMap("a", withFile("a.rego", goodRego)), policyConfigMap("b")},
			err: errors.New("evaluate enforcement rules: boom\nsecond line"),
			want: map[string][]string{
				"a": {"evaluate enforcement rules: boom; data sha256:"},
				"b": {"evaluate enforcement rules: boom; data sha256:"},
			},
		},
		"errors located only in the built-ins give the first of them, not a bare count": {
			cms:     []corev1.ConfigMap{policyConfigMap("lib", withFile("lib.rego", "package daemonguard.lib\n\nx := 1\n"))},
			compile: true,
			want:    map[string][]string{"lib": {".rego:", ": rego_", "more in the policy set)"}},
		},
		"a builtin outside the sandbox is recorded on its ConfigMap with file, line and name": {
			cms:     []corev1.ConfigMap{policyConfigMap("no-latest", withFile("no_latest.rego", goodRego)), policyConfigMap("exfil", withFile("exfil.rego", httpSendRego))},
			compile: true,
			want: map[string][]string{"exfil": {"configmap/exfil/exfil.rego:4: rego_type_error: builtin http.send is not allowed in daemonguard policies",
				" rejected, the last good policy set keeps serving"}},
		},
		"a load stopped by a limit is recorded on the ConfigMap it stopped in": {
			cms:  []corev1.ConfigMap{policyConfigMap("no-latest", withFile("no_latest.rego", goodRego)), policyConfigMap("big", withFile("big.rego", goodRego))},
			err:  &policy.LimitError{Limit: "the load deadline of 10s", While: "evaluating the enforcement rules", At: &ast.Location{File: "configmap/big/big.rego", Row: 4}},
			want: map[string][]string{"big": {"policy set exceeded the load deadline of 10s while evaluating the enforcement rules at configmap/big/big.rego:4; data sha256:"}},
		},
		"a ConfigMap that breaks the built-ins is blamed, the valid one beside it is not": {
			cms: []corev1.ConfigMap{
				policyConfigMap("lib", withFile("lib.rego", "package daemonguard.lib\n\nx := 1\n")),
				policyConfigMap("no-latest", withFile("no_latest.rego", goodRego)),
			},
			compile: true,
			want:    map[string][]string{"lib": {"more in the policy set)"}},
		},
		"an enforcement action that is none is blamed on the parameters' ConfigMap": {
			cms: []corev1.ConfigMap{
				policyConfigMap("params", withFile("parameters.yaml", "enforcement: {rollout_annotations: block}\n")),
				policyConfigMap("no-latest", withFile("no_latest.rego", goodRego)),
			},
			compile: true,
			want:    map[string][]string{"params": {`parameters.enforcement.rollout_annotations: enforcement action "block" is not one of deny, warn, dryrun`}},
		},
		"a loaded set removes the annotation": {
			cms:  []corev1.ConfigMap{policyConfigMap("fixed", withFile("no_latest.rego", goodRego), withPolicyError("old error"))},
			want: map[string][]string{"fixed": nil},
		},
		"a loaded set writes nothing when no ConfigMap carries an error": {
			cms: []corev1.ConfigMap{policyConfigMap("fine", withFile("no_latest.rego", goodRego))},
		},
		"a ConfigMap the error no longer names loses its annotation": {
			cms: []corev1.ConfigMap{
				policyConfigMap("fixed", withFile("no_latest.rego", goodRego), withPolicyError("old error")),
				policyConfigMap("broken", withFile("broken.rego", parseErrorRego)),
			},
			compile: true,
			want:    map[string][]string{"fixed": nil, "broken": {"configmap/broken/broken.rego:5:"}},
		},
		"an outdated error is replaced": {
			cms:     []corev1.ConfigMap{policyConfigMap("broken", withFile("broken.rego", parseErrorRego), withPolicyError("configmap/broken/broken.rego:9: old"))},
			compile: true,
			want:    map[string][]string{"broken": {"configmap/broken/broken.rego:5:"}},
		},
		"a long error is cut to the bound on a rune boundary": {
			cms:  []corev1.ConfigMap{policyConfigMap("a")},
			err:  long,
			want: map[string][]string{"a": {"prepare validation query: éé", "é…; data sha256:"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			reloadErr := tc.err
			if tc.compile {
				_, _, _, reloadErr = newTestReloader(t).compile(context.Background(), tc.cms)
				if reloadErr == nil {
					t.Fatal("the ConfigMaps compile; the case needs a broken one")
				}
			}
			writes := planPolicyErrors(tc.cms, reloadErr)
			got := map[string]policyErrorWrite{}
			for _, w := range writes {
				got[w.ConfigMap] = w
			}
			for cm, substrings := range tc.want {
				w, ok := got[cm]
				if !ok {
					t.Errorf("no write for ConfigMap %s; writes %+v", cm, writes)
					continue
				}
				if w.ResourceVersion != "7" {
					t.Errorf("%s: write at resourceVersion %q, want the evaluated 7", cm, w.ResourceVersion)
				}
				if substrings == nil && w.Value != "" {
					t.Errorf("%s: value %q, want the annotation removed", cm, w.Value)
				}
				if substrings != nil && w.Value == "" {
					t.Errorf("%s: annotation removed, want a value holding %q", cm, substrings)
				}
				for _, s := range substrings {
					if !strings.Contains(w.Value, s) {
						t.Errorf("%s: value %q lacks %q", cm, w.Value, s)
					}
				}
				if strings.Contains(w.Value, "\n") || !utf8.ValidString(w.Value) {
					t.Errorf("%s: value %q is not one line of valid UTF-8", cm, w.Value)
				}
				const bound = maxPolicyErrorLen + 200 // the error part plus digest and explanation
				if len(w.Value) > bound {
					t.Errorf("%s: value of %d bytes, want at most %d", cm, len(w.Value), bound)
				}
			}
			for cm := range got {
				if _, ok := tc.want[cm]; !ok {
					t.Errorf("unexpected write to ConfigMap %s: %+v", cm, got[cm])
				}
			}

			// Once written, the same decision plans nothing: on this replica, on others
			// (which see the written annotation at a newer resourceVersion), and on the reload
			// a write of the annotation alone would cause were it not filtered.
			for i := range tc.cms {
				cm := &tc.cms[i]
				if w, ok := got[cm.Name]; ok {
					if w.Value == "" {
						delete(cm.Annotations, admission.PolicyErrorAnnotation)
					} else {
						cm.Annotations[admission.PolicyErrorAnnotation] = w.Value
					}
					cm.ResourceVersion = "8"
				}
			}
			if again := planPolicyErrors(tc.cms, reloadErr); len(again) > 0 {
				t.Errorf("the written decision plans more writes: %+v", again)
			}
		})
	}
}

func TestDataDigest(t *testing.T) {
	base := policyConfigMap("a", withFile("a.rego", goodRego), withFile("parameters.yaml", "x: 1\n"))
	annotated := policyConfigMap("a", withFile("a.rego", goodRego), withFile("parameters.yaml", "x: 1\n"), withPolicyError("e"))
	annotated.ResourceVersion = "99"
	if dataDigest(&base) != dataDigest(&annotated) {
		t.Error("the digest changes with metadata; it must identify the data only")
	}
	cases := map[string]corev1.ConfigMap{
		"a changed value":        policyConfigMap("a", withFile("a.rego", goodRego+"\n"), withFile("parameters.yaml", "x: 1\n")),
		"a renamed key":          policyConfigMap("a", withFile("b.rego", goodRego), withFile("parameters.yaml", "x: 1\n")),
		"a key moved into value": policyConfigMap("a", withFile("a.rego", goodRego+"parameters.yaml"), withFile("", "x: 1\n")),
		"binary data added": func() corev1.ConfigMap {
			cm := policyConfigMap("a", withFile("a.rego", goodRego), withFile("parameters.yaml", "x: 1\n"))
			cm.BinaryData = map[string][]byte{"blob": {0}}
			return cm
		}(),
	}
	for name, cm := range cases {
		if dataDigest(&cm) == dataDigest(&base) {
			t.Errorf("%s: same digest %s", name, dataDigest(&base))
		}
	}
	if d := dataDigest(&base); !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+12 {
		t.Errorf("digest %q, want sha256: and 12 hex digits", d)
	}
}

func TestPolicyContentChanged(t *testing.T) {
	old := policyConfigMap("a", withFile("a.rego", goodRego))
	cases := map[string]struct {
		change func(*corev1.ConfigMap)
		want   bool
	}{
		"the policy error annotation alone changes": {func(cm *corev1.ConfigMap) { cm.Annotations[admission.PolicyErrorAnnotation] = "e" }, false},
		"another annotation and the resourceVersion change": {func(cm *corev1.ConfigMap) {
			cm.Annotations["argocd.argoproj.io/tracking-id"] = "x"
			cm.ResourceVersion = "8"
		}, false},
		"a Rego file changes":    {func(cm *corev1.ConfigMap) { cm.Data["a.rego"] += "\n" }, true},
		"a file is added":        {func(cm *corev1.ConfigMap) { cm.Data["parameters.yaml"] = "x: 1\n" }, true},
		"binary data is added":   {func(cm *corev1.ConfigMap) { cm.BinaryData = map[string][]byte{"b": {1}} }, true},
		"the labels change":      {func(cm *corev1.ConfigMap) { cm.Labels["team"] = "x" }, true},
		"nothing changes at all": {func(*corev1.ConfigMap) {}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			updated := old.DeepCopy()
			tc.change(updated)
			if got := policyContentChanged.Update(event.UpdateEvent{ObjectOld: old.DeepCopy(), ObjectNew: updated}); got != tc.want {
				t.Errorf("reload = %v, want %v", got, tc.want)
			}
		})
	}
	if !policyContentChanged.Create(event.CreateEvent{Object: old.DeepCopy()}) || !policyContentChanged.Delete(event.DeleteEvent{Object: old.DeepCopy()}) {
		t.Error("creates and deletes must reload")
	}
}
