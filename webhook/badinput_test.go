package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

var (
	builtinOnce    sync.Once
	builtinHandler *Handlers
	builtinErr     error
)

// testHandlers serves the built-in policies with no cluster facts, as the fuzz target and the
// bad-input table need.
func testHandlers(tb testing.TB) *Handlers {
	tb.Helper()
	builtinOnce.Do(func() {
		modules, params, err := policy.Builtin()
		if err != nil {
			builtinErr = err
			return
		}
		set, err := policy.Compile(context.Background(), modules, params)
		if err != nil {
			builtinErr = err
			return
		}
		// Every namespace is marked for node agents: these reviews exercise the inject policy.
		marked := admission.Lookups{NamespaceLabels: func(context.Context, string) (map[string]string, error) {
			return map[string]string{admission.NodeAgentsLabel: "true"}, nil
		}}
		builtinHandler = &Handlers{Engine: policy.NewEngine(set), ExemptNamespaces: []string{"kube-system"}, FailureMode: admission.FailClosed, Lookups: marked, Log: logr.Discard()}
	})
	if builtinErr != nil {
		tb.Fatal(builtinErr)
	}
	return builtinHandler
}

const seedObject = `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"nginx-ds","namespace":"default"},"spec":{"selector":{"matchLabels":{"app":"nginx-ds"}},"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}},"template":{"metadata":{"labels":{"app":"nginx-ds"}},"spec":{"tolerations":[{"key":"node-role.kubernetes.io/master","effect":"NoSchedule"}],"containers":[{"name":"nginx-ds","image":"nginx:1.7.9","ports":[{"containerPort":80}]}]}}}}`

const podObject = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default","ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"nginx-ds","uid":"u","controller":true}]},"spec":{"nodeName":"worker-0","containers":[{"name":"c","image":"x"}]}}`

func review(group, version, kind, op, object string) string {
	return `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u-1","kind":{"group":"` + group + `","version":"` + version + `","kind":"` + kind +
		`"},"resource":{"group":"` + group + `","version":"` + version + `","resource":"x"},"namespace":"default","operation":"` + op + `","object":` + object + `}}`
}

// serve posts body to one endpoint and returns the HTTP status and the decoded response, if any.
func serve(h http.Handler, body []byte) (int, *admissionv1.AdmissionResponse) {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var ar admissionv1.AdmissionReview
	if json.Unmarshal(rec.Body.Bytes(), &ar) != nil {
		return rec.Code, nil
	}
	return rec.Code, ar.Response
}

func TestBadAdmissionReviewsGetClearAnswers(t *testing.T) {
	h := testHandlers(t)
	tests := map[string]struct {
		path      string
		body      string
		wantCode  int32  // status code inside the AdmissionReview response; 0 = allowed
		wantInMsg string // part of the response message
	}{
		"truncated JSON": {
			path: MutateDaemonSetPath, body: review("apps", "v1", "DaemonSet", "CREATE", seedObject)[:120], wantCode: 400,
		},
		// controller-runtime reads a review of an unknown version as v1; the answer is well-formed.
		"unknown apiVersion of the review": {
			path: ValidateDaemonSetPath, body: strings.Replace(review("apps", "v1", "DaemonSet", "CREATE", seedObject), "admission.k8s.io/v1", "admission.k8s.io/v2", 1),
		},
		"not an AdmissionReview": {
			path: MutateDaemonSetPath, body: `{"apiVersion":"v1","kind":"Pod"}`, wantCode: 400,
		},
		"missing object": {
			path: MutateDaemonSetPath, body: review("apps", "v1", "DaemonSet", "CREATE", "null"), wantCode: 400, wantInMsg: "no object",
		},
		"an object of another kind at the DaemonSet endpoint": {
			path: ValidateDaemonSetPath, body: review("", "v1", "ConfigMap", "CREATE", `{"kind":"ConfigMap"}`), wantCode: 400, wantInMsg: "admits apps/v1 DaemonSet",
		},
		"a DaemonSet at the Pod endpoint": {
			path: MutatePodPath, body: review("apps", "v1", "DaemonSet", "CREATE", seedObject), wantCode: 400, wantInMsg: "admits v1 Pod",
		},
		"an object that is a JSON list": {
			path: MutateDaemonSetPath, body: review("apps", "v1", "DaemonSet", "CREATE", `[1,2]`), wantCode: 400,
		},
		"a template of the wrong type": {
			path: MutateDaemonSetPath, body: review("apps", "v1", "DaemonSet", "CREATE", `{"spec":{"template":"x"}}`), wantCode: 400, wantInMsg: "template",
		},
		"a Pod owned by a ReplicaSet passes untouched": {
			path: MutatePodPath, body: review("", "v1", "Pod", "CREATE", strings.Replace(podObject, `"kind":"DaemonSet"`, `"kind":"ReplicaSet"`, 1)),
			wantInMsg: "not controlled by a DaemonSet",
		},
	}
	eps := h.Endpoints()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, resp := serve(eps[tc.path], []byte(tc.body))
			if code != http.StatusOK && code != http.StatusBadRequest {
				t.Fatalf("HTTP %d", code)
			}
			if resp == nil {
				if code != http.StatusBadRequest {
					t.Fatalf("HTTP %d with no AdmissionReview", code)
				}
				return
			}
			var gotCode int32
			msg := ""
			if resp.Result != nil {
				gotCode, msg = resp.Result.Code, resp.Result.Message
			}
			if tc.wantCode != 0 && (resp.Allowed || gotCode != tc.wantCode) {
				t.Errorf("allowed=%v code=%d msg=%q, want code %d", resp.Allowed, gotCode, msg, tc.wantCode)
			}
			if tc.wantCode == 0 && !resp.Allowed {
				t.Errorf("denied: %q", msg)
			}
			if !strings.Contains(msg, tc.wantInMsg) {
				t.Errorf("message %q lacks %q", msg, tc.wantInMsg)
			}
		})
	}
}

// FuzzAdmissionReview feeds arbitrary bodies to every endpoint: decode, mutate and evaluate must
// never panic, and every answer is a well-formed AdmissionReview or an HTTP 400. A DaemonSet that
// is admitted with a patch must be admitted with no patch after the patch is applied.
func FuzzAdmissionReview(f *testing.F) {
	h := testHandlers(f)
	f.Add([]byte(review("apps", "v1", "DaemonSet", "CREATE", seedObject)))
	f.Add([]byte(review("apps", "v1", "DaemonSet", "UPDATE", strings.Replace(seedObject, `"maxUnavailable":1`, `"maxUnavailable":"100%"`, 1))))
	f.Add([]byte(review("", "v1", "Pod", "CREATE", podObject)))
	f.Add([]byte(review("apps", "v1", "DaemonSet", "CREATE", `{"spec":{"template":{"spec":{"tolerations":{}}}}}`)))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":`))
	f.Add([]byte(`null`))
	eps := h.Endpoints()
	f.Fuzz(func(t *testing.T, body []byte) {
		for path, ep := range eps {
			code, resp := serve(ep, body)
			if code != http.StatusOK && code != http.StatusBadRequest {
				t.Fatalf("%s: HTTP %d", path, code)
			}
			if code == http.StatusOK && resp == nil {
				t.Fatalf("%s: HTTP 200 without an AdmissionReview response", path)
			}
			if resp == nil || !resp.Allowed || len(resp.Patch) == 0 || path != MutateDaemonSetPath {
				continue
			}
			var ar admissionv1.AdmissionReview
			if json.Unmarshal(body, &ar) != nil || ar.Request == nil {
				continue
			}
			patched := applyRawPatch(t, ar.Request.Object.Raw, resp.Patch)
			ar.Request.Object.Raw = patched
			again, _ := json.Marshal(ar)
			_, resp2 := serve(ep, again)
			if resp2 == nil || !resp2.Allowed || len(resp2.Patch) != 0 {
				t.Fatalf("second pass over %s was not an empty admission: %+v", patched, resp2)
			}
		}
	})
}

func applyRawPatch(t *testing.T, raw, patch []byte) []byte {
	t.Helper()
	p, err := jsonpatchapply.DecodePatch(patch)
	if err != nil {
		t.Fatalf("decode patch %s: %v", patch, err)
	}
	out, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("apply %s: %v", patch, err)
	}
	return out
}
