package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// BenchmarkReviewSize measures one validating review against the size of what a tenant controls,
// up to what the API server lets through: a daemonguard.io/steps annotation of commas (every step
// empty, the worst case for the rollout_annotations policy) up to 256 KiB, the API server's limit
// for all of an object's annotations; and a DaemonSet made large by its template (environment
// variables) up to 1.5 MiB, etcd's default object limit. Besides time, B/op (allocated per review)
// and cpu-ns/op, it reports the answer's size (answer-B/op) and how far the live heap grew over the
// whole run (heap-growth-MiB): a review whose cost or answer grew with the square of its input, or
// whose memory was kept, shows in these long before it OOM-kills a replica. Results:
// docs/performance.md ("Review size").
//
//	go test -short -run '^$' -bench BenchmarkReviewSize -benchmem ./webhook/
func BenchmarkReviewSize(b *testing.B) {
	h, cases := benchHandlers(b, 5)
	endpoint := h.Endpoints()[ValidateDaemonSetPath]
	base := fixture.Get(cases, "validate-daemonset/create")
	for _, size := range []int{1 << 10, 16 << 10, 64 << 10, 255 << 10} {
		review := resizedReview(b, base.Review, func(obj map[string]any) {
			annotations(obj)["daemonguard.io/steps"] = strings.Repeat(",", size)
		})
		b.Run(fmt.Sprintf("steps-commas=%dKiB", size>>10), func(b *testing.B) { benchReviewSize(b, endpoint, review) })
	}
	for _, size := range []int{16 << 10, 256 << 10, 1536 << 10} {
		review := resizedReview(b, base.Review, func(obj map[string]any) { growTemplate(obj, size) })
		b.Run(fmt.Sprintf("object=%dKiB", size>>10), func(b *testing.B) { benchReviewSize(b, endpoint, review) })
	}
}

// benchReviewSize measures endpoint's answer to review: time, allocations and CPU per review, the
// answer's size, and how far the heap (after a GC) grew from before the first to after the last.
func benchReviewSize(b *testing.B, endpoint http.Handler, review []byte) {
	serve := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, ValidateDaemonSetPath, bytes.NewReader(review))
		r.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		endpoint.ServeHTTP(w, r)
		return w
	}
	first := serve()
	var answer admissionv1.AdmissionReview
	if err := json.Unmarshal(first.Body.Bytes(), &answer); err != nil || answer.Response == nil {
		b.Fatalf("HTTP %d, %.300s (%v)", first.Code, first.Body, err)
	}
	before := liveHeap()
	b.SetBytes(int64(len(review)))
	b.ReportAllocs()
	stopCPU := reportCPU(b)
	answerBytes := 0
	for b.Loop() {
		answerBytes += serve().Body.Len()
	}
	stopCPU()
	b.ReportMetric(float64(answerBytes)/float64(b.N), "answer-B/op")
	b.ReportMetric(float64(liveHeap()-before)/(1<<20), "heap-growth-MiB")
}

// liveHeap is the heap in use after a full collection: what the process keeps, not its garbage.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// resizedReview returns the AdmissionReview raw with its object changed by grow.
func resizedReview(b *testing.B, raw []byte, grow func(obj map[string]any)) []byte {
	b.Helper()
	var review map[string]any
	if err := json.Unmarshal(raw, &review); err != nil {
		b.Fatal(err)
	}
	request, _ := review["request"].(map[string]any)
	obj, ok := request["object"].(map[string]any)
	if !ok {
		b.Fatalf("fixture review has no object")
	}
	grow(obj)
	out, err := json.Marshal(review)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// annotations returns the object's annotations, creating them when absent.
func annotations(obj map[string]any) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	a, ok := meta["annotations"].(map[string]any)
	if !ok {
		a = map[string]any{}
		meta["annotations"] = a
	}
	return a
}

// growTemplate adds environment variables of 1 KiB each to the first container of the pod
// template until the object has grown by about size bytes.
func growTemplate(obj map[string]any, size int) {
	spec, _ := obj["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	podSpec, _ := template["spec"].(map[string]any)
	containers, _ := podSpec["containers"].([]any)
	container, _ := containers[0].(map[string]any)
	env, _ := container["env"].([]any)
	value := strings.Repeat("v", 1000)
	for i := 0; i < size/1024; i++ {
		env = append(env, map[string]any{"name": fmt.Sprintf("BULK_%05d", i), "value": value})
	}
	container["env"] = env
}
