package webhook

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/loadgen/fixture"
)

// referenceServe is what Serve replaced and must answer as: the type check in front of
// controller-runtime's admission.Webhook, which reads the body again and decodes it with its codec
// (a kind-sniffing pass, then the decoding proper).
func referenceServe(h admission.Handler) http.Handler {
	next := &admission.Webhook{Handler: h}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
		r.Body.Close()
		if err != nil {
			http.Error(w, "read admission review: "+err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if len(body) <= maxReviewBytes {
			if _, _, err := checkReviewType(body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// echoRequest answers with everything it was given, so that two servers that decode a review
// differently answer differently.
var echoRequest = admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
	decoded, err := json.Marshal(req.AdmissionRequest)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	return admission.Allowed(string(decoded))
})

// httpAnswer is what a client sees of one HTTP exchange.
type httpAnswer struct {
	code        int
	contentType string
	body        string
}

func exchange(h http.Handler, contentType string, body []byte, noBody bool) httpAnswer {
	req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	if noBody {
		req.Body = nil
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return httpAnswer{rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()}
}

// serveCorpus is every review the tests here and the fuzz target's corpus hold, the load
// generator's realistic ones, and hand-made edge cases of the decoding.
func serveCorpus(t testing.TB) [][]byte {
	t.Helper()
	seed := review("apps", "v1", "DaemonSet", "CREATE", seedObject)
	bodies := []string{
		seed,
		review("apps", "v1", "DaemonSet", "UPDATE", seedObject),
		review("", "v1", "Pod", "CREATE", podObject),
		strings.Replace(seed, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1),
		strings.Replace(seed, "admission.k8s.io/v1", "admission.k8s.io/v2", 1),
		strings.Replace(seed, `"kind":"AdmissionReview"`, `"kind":"Review"`, 1),
		strings.Replace(seed, `"kind":"AdmissionReview",`, ``, 1),
		strings.Replace(seed, `"apiVersion":`, `"APIVERSION":`, 1),
		strings.Replace(seed, `"kind":"AdmissionReview"`, `"kind":"AdmissionReview","Kind":"AdmissionReview"`, 1),
		strings.Replace(seed, `"uid":"u-1"`, `"uid":"u-1","UID":"u-2"`, 1),
		strings.Replace(seed, `"request":`, `"Request":`, 1),
		strings.Replace(seed, `"operation":"CREATE"`, `"operation":5`, 1),
		strings.Replace(seed, `"uid":"u-1"`, `"uid":["u"]`, 1),
		strings.Replace(seed, `"maxUnavailable":1`, `"maxUnavailable":tru`, 1),
		strings.Replace(seed, `"maxUnavailable":1`, `"maxUnavailable":1e400`, 1),
		strings.Replace(seed, `nginx-ds"`, "nginx-\xff\xfe\"", 1),
		strings.Replace(seed, `nginx-ds"`, `nginx-\ud800"`, 1),
		strings.Replace(seed, `"namespace":"default"`, `"namespace":"kube-system"`, 1),
		seed + " \n",
		" \t\r\n" + seed,
		"\ufeff" + seed,
		seed + "{}",
		seed + "x",
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":null}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":5}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":null}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"u","allowed":true}}`,
		`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":`,
		`apiVersion: admission.k8s.io/v1` + "\nkind: AdmissionReview\n",
		`null`, `[]`, `{}`, `"AdmissionReview"`, ``, `{`, `}`,
	}
	out := make([][]byte, 0, len(bodies)+64)
	for _, b := range bodies {
		out = append(out, []byte(b))
	}
	cases, err := fixture.CasesWith(fixture.Options{UniqueObjects: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		out = append(out, c.Review)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzAdmissionReview", "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		body, err := readFuzzBytes(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, body)
	}
	return out
}

// readFuzzBytes reads the one []byte argument of a file of Go's fuzzing corpus.
func readFuzzBytes(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	lines.Buffer(nil, 16<<20)
	for lines.Scan() {
		line := lines.Text()
		if rest, ok := strings.CutPrefix(line, "[]byte("); ok && strings.HasSuffix(rest, ")") {
			s, err := strconv.Unquote(strings.TrimSuffix(rest, ")"))
			return []byte(s), err
		}
	}
	return nil, lines.Err()
}

// serveHandlers pairs each handler with a name: the echo, and daemonguard's three.
func serveHandlers(t testing.TB) map[string]admission.Handler {
	h := testHandlers(t)
	return map[string]admission.Handler{
		"echo": echoRequest, "mutate-daemonset": DaemonSetMutator{Handlers: h},
		"validate-daemonset": DaemonSetValidator{Handlers: h}, "mutate-pod": PodPinner{Handlers: h},
	}
}

// assertServesAsReference checks that Serve and referenceServe give the same status, content
// type and bytes for body.
func assertServesAsReference(t *testing.T, name string, h admission.Handler, contentType string, body []byte, noBody bool) {
	t.Helper()
	got := exchange(Serve(h), contentType, body, noBody)
	want := exchange(referenceServe(h), contentType, body, noBody)
	if got != want {
		t.Errorf("%s, content type %q, body %.300q:\nServe:     HTTP %d %q %.600s\nreference: HTTP %d %q %.600s",
			name, contentType, body, got.code, got.contentType, got.body, want.code, want.contentType, want.body)
	}
}

// TestServeAnswersAsControllerRuntime holds Serve to what it replaced, byte for byte, on every
// review of the corpus, under every content type the API server or a stray client sends, and on
// random corruptions of the corpus: what Serve saves (the codec's second parse) must change no
// answer, error messages included.
func TestServeAnswersAsControllerRuntime(t *testing.T) {
	corpus := serveCorpus(t)
	handlers := serveHandlers(t)
	for name, h := range handlers {
		for _, body := range corpus {
			for _, contentType := range []string{"application/json", "", "application/json; charset=utf-8", "text/plain"} {
				assertServesAsReference(t, name, h, contentType, body, false)
			}
		}
		assertServesAsReference(t, name+" without a body", h, "application/json", nil, true)
	}

	rng := rand.New(rand.NewPCG(3, 7))
	mutations := 3000
	if testing.Short() {
		mutations = 300
	}
	for range mutations {
		body := mutateBytes(rng, corpus[rng.IntN(len(corpus))])
		assertServesAsReference(t, "echo", handlers["echo"], "application/json", body, false)
	}
}

// TestServeAtTheSizeLimit: a body that reaches controller-runtime's 7 MiB limit gets its 413,
// whether or not it is a well-formed review; one just under the limit is decoded.
func TestServeAtTheSizeLimit(t *testing.T) {
	h := serveHandlers(t)["echo"]
	pad := func(n int) []byte {
		head := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","name":"`
		tail := `"}}`
		return []byte(head + strings.Repeat("a", n-len(head)-len(tail)) + tail)
	}
	for _, n := range []int{maxReviewBytes - 1, maxReviewBytes, maxReviewBytes + 1, maxReviewBytes + 4096} {
		body := pad(n)
		got := exchange(Serve(h), "application/json", body, false)
		wantTooLarge := n >= maxReviewBytes
		if tooLarge := strings.Contains(got.body, `"code":413`); tooLarge != wantTooLarge || got.code != http.StatusOK {
			t.Errorf("%d bytes: HTTP %d, %.200s; want 413 inside: %v", n, got.code, got.body, wantTooLarge)
		}
		assertServesAsReference(t, "echo at "+strconv.Itoa(n)+" bytes", h, "application/json", body, false)
	}
}

// mutateBytes returns a copy of b with a few random edits: bytes flipped to JSON's structural
// characters or to random ones, deleted, duplicated or cut off.
func mutateBytes(rng *rand.Rand, b []byte) []byte {
	out := bytes.Clone(b)
	const structural = `{}[]:,"\ 0123456789-+.eEtruefalsn`
	for range 1 + rng.IntN(3) {
		if len(out) == 0 {
			return out
		}
		i := rng.IntN(len(out))
		switch rng.IntN(5) {
		case 0:
			out[i] = structural[rng.IntN(len(structural))]
		case 1:
			out[i] = byte(rng.IntN(256))
		case 2:
			out = append(out[:i], out[i+1:]...)
		case 3:
			j := min(len(out), i+1+rng.IntN(16))
			out = append(out[:j], append(bytes.Clone(out[i:j]), out[j:]...)...)
		case 4:
			out = out[:i]
		}
	}
	return out
}

// FuzzServeAnswersAsControllerRuntime extends TestServeAnswersAsControllerRuntime to whatever the
// fuzzer finds.
func FuzzServeAnswersAsControllerRuntime(f *testing.F) {
	for _, body := range serveCorpus(f) {
		f.Add(body)
	}
	h := serveHandlers(f)["echo"]
	f.Fuzz(func(t *testing.T, body []byte) {
		assertServesAsReference(t, "echo", h, "application/json", body, false)
	})
}
