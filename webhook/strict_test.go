package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// reviewHeadAgrees checks reviewHead against json.Unmarshal: whenever the cheap scan answers, it
// must answer what the full decode sees.
func reviewHeadAgrees(t *testing.T, body []byte) {
	t.Helper()
	apiVersion, kind, ok := reviewHead(body)
	if !ok {
		return
	}
	var head struct {
		APIVersion *string `json:"apiVersion"`
		Kind       *string `json:"kind"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		// The scan does not validate nested values; the full check would reject the body, and so
		// does controller-runtime's decoder after it. The head must still be what is written.
		return
	}
	if head.APIVersion == nil || head.Kind == nil || *head.APIVersion != apiVersion || *head.Kind != kind {
		t.Errorf("reviewHead(%.200s) = %q, %q; json.Unmarshal sees %s, %s", body, apiVersion, kind, deref(head.APIVersion), deref(head.Kind))
	}
}

func TestReviewHead(t *testing.T) {
	seed := review("apps", "v1", "DaemonSet", "CREATE", seedObject)
	tests := map[string]struct {
		body   string
		wantOK bool // the cheap scan answers (else the full check decides)
	}{
		"what the API server sends":      {body: seed, wantOK: true},
		"kind first, as Go encodes it":   {body: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"kind":{"kind":"X"},"apiVersion":"y"}}`, wantOK: true},
		"whitespace everywhere":          {body: " {\n \"apiVersion\" : \"admission.k8s.io/v1\" ,\t\"kind\":\"AdmissionReview\" , \"request\" : [ 1 , {\"a\":\"}\\\"\"} ] }\n", wantOK: true},
		"a duplicate kind later":         {body: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{},"kind":"Other"}`},
		"a differently cased key":        {body: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","APIVERSION":"admission.k8s.io/v2"}`},
		"a Kelvin-sign kind":             {body: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","\u212aind":"Other"}`},
		"an escaped key":                 {body: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","kin\u0064":"Other"}`},
		"an escaped value":               {body: `{"kind":"Admission\u0052eview","apiVersion":"admission.k8s.io/v1"}`},
		"kind missing":                   {body: `{"apiVersion":"admission.k8s.io/v1","request":{}}`},
		"kind null":                      {body: `{"kind":null,"apiVersion":"admission.k8s.io/v1"}`},
		"truncated":                      {body: seed[:120]},
		"trailing garbage":               {body: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"} x`},
		"not an object":                  {body: `["kind","AdmissionReview"]`},
		"empty object":                   {body: `{}`},
		"unbalanced nested value":        {body: `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"a":[}`},
		"a string with an escaped quote": {body: `{"request":{"x":"\"kind\":\"Other\""},"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1"}`, wantOK: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, ok := reviewHead([]byte(tc.body)); ok != tc.wantOK {
				t.Errorf("ok = %v, want %v", ok, tc.wantOK)
			}
			reviewHeadAgrees(t, []byte(tc.body))
		})
	}
}

// Every body of the AdmissionReview fuzz corpus, and the seeds, through both checks.
func TestReviewHeadAgreesOnTheFuzzCorpus(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzAdmissionReview", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no corpus: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// go test fuzz v1 corpus files hold one []byte("...") line after the header.
		for _, line := range strings.Split(string(data), "\n")[1:] {
			if body, ok := strings.CutPrefix(line, "[]byte("); ok {
				s, err := strconv.Unquote(strings.TrimSuffix(body, ")"))
				if err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				reviewHeadAgrees(t, []byte(s))
			}
		}
	}
}

func FuzzReviewHead(f *testing.F) {
	f.Add([]byte(review("apps", "v1", "DaemonSet", "CREATE", seedObject)))
	f.Add([]byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","kind":"x"}`))
	f.Add([]byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1beta1","request":{"a":"\\\""}}`))
	f.Fuzz(func(t *testing.T, body []byte) { reviewHeadAgrees(t, body) })
}

// TestReadBodyReadsWhatIsSentWhateverContentLengthSays checks that the body is read whole and
// unchanged whether Content-Length is right, unknown, too small or too large, and cut at the limit.
func TestReadBodyReadsWhatIsSentWhateverContentLengthSays(t *testing.T) {
	body := strings.Repeat("0123456789", 1000)
	for _, tc := range []struct {
		name    string
		length  int64
		want    string
		wantErr bool
	}{
		{"exact", int64(len(body)), body, false},
		{"unknown", -1, body, false},
		{"zero", 0, body, false},
		{"announced shorter", 10, body, false},
		{"announced longer", int64(len(body)) + 1, "", true},
		{"announced beyond the limit", maxReviewBytes + 10, body, false},
		{"announced beyond what is read into one buffer", maxPooledBody + 1, body, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readBody(strings.NewReader(body), tc.length, make([]byte, 0, 100))
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && string(got) != tc.want {
				t.Fatalf("read %d bytes, want %d", len(got), len(tc.want))
			}
		})
	}
	// A client that announces a large body and sends little gets no buffer of the announced size.
	allocs := testing.AllocsPerRun(10, func() {
		if _, err := readBody(strings.NewReader("{}"), maxReviewBytes, nil); err != nil {
			t.Fatal(err)
		}
	})
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	before := m.TotalAlloc
	if _, err := readBody(strings.NewReader("{}"), maxReviewBytes, nil); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&m)
	if grew := m.TotalAlloc - before; grew > 64<<10 {
		t.Errorf("reading 2 bytes announced as %d allocated %d bytes (%v allocations)", maxReviewBytes, grew, allocs)
	}
	huge := strings.Repeat("x", maxReviewBytes+100)
	for _, length := range []int64{-1, maxReviewBytes, int64(len(huge))} {
		got, err := readBody(strings.NewReader(huge), length, nil)
		if err != nil || len(got) != maxReviewBytes+1 {
			t.Fatalf("Content-Length %d: read %d bytes (err %v), want the limit plus one (%d)", length, len(got), err, maxReviewBytes+1)
		}
	}
}

// TestServeGivesEachRequestItsOwnBody runs concurrent reviews of different sizes through Serve,
// whose read buffers are reused between requests: each handler must see exactly the object its
// client sent, for as long as it runs.
func TestServeGivesEachRequestItsOwnBody(t *testing.T) {
	object := func(n int) string { return `{"metadata":{"name":"` + strings.Repeat("x", n) + `"}}` }
	handler := Serve(admission.HandlerFunc(func(_ context.Context, req admission.Request) admission.Response {
		n, err := strconv.Atoi(string(req.UID))
		if err != nil {
			return admission.Errored(http.StatusBadRequest, err)
		}
		runtime.Gosched() // let other requests take buffers meanwhile
		if got := string(req.Object.Raw); got != object(n) {
			t.Errorf("handler saw an object of %d bytes that differs from the %d sent", len(got), len(object(n)))
		}
		return admission.Allowed("")
	}))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				n := (g*200 + i) % 700
				body := strings.Replace(review("apps", "v1", "DaemonSet", "CREATE", object(n)), `"uid":"u-1"`, `"uid":"`+strconv.Itoa(n)+`"`, 1)
				code, resp := serve(handler, []byte(body))
				if code != http.StatusOK || resp == nil || !resp.Allowed || string(resp.UID) != strconv.Itoa(n) {
					t.Errorf("HTTP %d: %+v", code, resp)
					return
				}
			}
		})
	}
	wg.Wait()
}
