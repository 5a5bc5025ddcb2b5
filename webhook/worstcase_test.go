package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// Bounds of one worst-case review, held by TestWorstCaseReviewsDoNotMoveTheHeap and quoted in
// docs/admission.md ("Bounds on each review").
const (
	// worstAnswer is the most an answer may take: a denial, warnings and a patch, none of which
	// may quote the object back at length.
	worstAnswer = 64 << 10
	// worstPeakHeap is how far the heap may grow while one review the API server can send (objects
	// etcd can store) is answered, from its body read to its answer: DefaultBounds.MaxConcurrent
	// of these at once stay under DefaultBounds.HeapLimit.
	worstPeakHeap = 40 << 20
	// worstPeakHeapOffSpec is how far a body just under ReviewBodyLimit that no API server sends
	// may grow it: half the chart's memory limit, so one alone does not take a replica down; two
	// at once pass DefaultBounds.HeapLimit, and the watchdog cancels them.
	worstPeakHeapOffSpec = 256 << 20
	// worstKeptHeap is how much of it may remain after a collection: nothing the review brought
	// is kept.
	worstKeptHeap = 2 << 20
)

// worstObject is the seed DaemonSet with its annotations and template grown: a
// daemonguard.io/steps annotation of steps commas (every step empty, the worst case for
// rollout_annotations) and environment variables adding about template bytes.
func worstObject(t *testing.T, steps, template int, pad string) string {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(seedObject), &obj); err != nil {
		t.Fatal(err)
	}
	annotations(obj)["daemonguard.io/steps"] = strings.Repeat(",", steps)
	if pad != "" {
		annotations(obj)["example.com/pad"] = pad
	}
	growTemplate(obj, template)
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// peakHeap runs f and returns how far the heap (policy.HeapBytes, what the watchdog reads) grew
// at most while it ran, sampled every half millisecond, and how much of that remained after a
// collection.
func peakHeap(f func()) (peak, kept uint64) {
	runtime.GC()
	base := policy.HeapBytes()
	var top atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(500 * time.Microsecond)
		defer tick.Stop()
		for {
			if h := policy.HeapBytes(); h > top.Load() {
				top.Store(h)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	f()
	close(done)
	<-sampled
	// Twice: a pool's buffers outlive the first collection (sync.Pool's victim cache).
	runtime.GC()
	runtime.GC()
	if h := policy.HeapBytes(); h > base {
		kept = h - base
	}
	if t := top.Load(); t > base {
		peak = t - base
	}
	return peak, kept
}

// TestWorstCaseReviewsDoNotMoveTheHeap sends the largest reviews anyone on the pod network can
// send straight to each DaemonSet endpoint, as the API server would never send them, and holds
// that each answer is small and that the heap grows by at most worstPeakHeap while it is
// answered and keeps nothing after. Anyone who can reach the port may send these: they are what
// the bounds are for, where the port cannot be closed to all but the API server.
func TestWorstCaseReviewsDoNotMoveTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("sends several MiB of reviews")
	}
	h := testHandlers(t)
	eps := h.Endpoints()
	overhead := len(review("apps", "v1", "DaemonSet", "CREATE", ""))
	daemonSets := []string{MutateDaemonSetPath, ValidateDaemonSetPath}
	// A 1.5 MiB object with a steps annotation of 256 KiB, the API server's limit for all of an
	// object's annotations, and a stored object of 1.5 MiB, its template grown.
	object := worstObject(t, 256<<10, 1280<<10, "")
	stored := worstObject(t, 0, 1536<<10, "")
	// Small annotations, the most structure per byte, to just under the body limit.
	var small strings.Builder
	small.WriteString(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"x","namespace":"default","annotations":{"a":"b"`)
	for i := 0; small.Len() < ReviewBodyLimit-overhead-100; i++ {
		fmt.Fprintf(&small, `,"k%07d":"v"`, i)
	}
	small.WriteString(`}},"spec":{}}`)
	tests := map[string]struct {
		body     string
		paths    []string
		wantCode int    // the HTTP status
		peak     uint64 // the most the heap may grow while it is answered
	}{
		"a 1.5 MiB object whose steps annotation is 256 KiB of commas": {
			body: review("apps", "v1", "DaemonSet", "CREATE", object), paths: daemonSets, wantCode: http.StatusOK, peak: worstPeakHeap,
		},
		"an UPDATE of two 1.5 MiB objects": {
			body:  strings.Replace(review("apps", "v1", "DaemonSet", "UPDATE", stored), `"object":`, `"oldObject":`+stored+`,"object":`, 1),
			paths: daemonSets, wantCode: http.StatusOK, peak: worstPeakHeap,
		},
		"a 1.5 MiB pod": {
			body:  review("", "v1", "Pod", "CREATE", strings.Replace(podObject, `"spec":{`, `"spec":{"env":"`+strings.Repeat("e", 1536<<10)+`",`, 1)),
			paths: []string{MutatePodPath}, wantCode: http.StatusOK, peak: worstPeakHeap,
		},
		"a body just under 7 MiB of small annotations": {
			body: review("apps", "v1", "DaemonSet", "CREATE", small.String()), paths: daemonSets, wantCode: http.StatusOK, peak: worstPeakHeapOffSpec,
		},
		"a body of 7 MiB": {
			body:  review("apps", "v1", "DaemonSet", "CREATE", worstObject(t, 0, 0, strings.Repeat("p", ReviewBodyLimit))),
			paths: append(daemonSets, MutatePodPath), wantCode: http.StatusRequestEntityTooLarge, peak: worstPeakHeap,
		},
		"a kind of 6 MiB": {
			body:  review("apps", "v1", strings.Repeat("K", 6<<20), "CREATE", seedObject),
			paths: append(daemonSets, MutatePodPath), wantCode: http.StatusOK, peak: worstPeakHeapOffSpec,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if tc.wantCode != http.StatusRequestEntityTooLarge && len(tc.body) >= ReviewBodyLimit {
				t.Fatalf("the review is %d bytes, over the body limit", len(tc.body))
			}
			for _, path := range tc.paths {
				var rec *httptest.ResponseRecorder
				body := []byte(tc.body)
				peak, kept := peakHeap(func() {
					req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					rec = httptest.NewRecorder()
					eps[path].ServeHTTP(rec, req)
				})
				t.Logf("%s: %d-byte review, HTTP %d, %d-byte answer, heap peak +%.1f MiB, kept +%.1f MiB",
					path, len(body), rec.Code, rec.Body.Len(), float64(peak)/(1<<20), float64(kept)/(1<<20))
				if rec.Code != tc.wantCode {
					t.Errorf("%s: HTTP %d, want %d: %.300s", path, rec.Code, tc.wantCode, rec.Body)
				}
				if tc.wantCode == http.StatusOK {
					var ar admissionv1.AdmissionReview
					if err := json.Unmarshal(rec.Body.Bytes(), &ar); err != nil || ar.Response == nil {
						t.Fatalf("%s: undecodable answer %.300s: %v", path, rec.Body, err)
					}
				}
				if rec.Body.Len() > worstAnswer {
					t.Errorf("%s: a %d-byte answer, want at most %d: %.300s", path, rec.Body.Len(), worstAnswer, rec.Body)
				}
				if peak > tc.peak {
					t.Errorf("%s: the heap grew by %d MiB while answering, want at most %d MiB", path, peak>>20, tc.peak>>20)
				}
				if kept > worstKeptHeap {
					t.Errorf("%s: the review left %d KiB on the heap, want at most %d KiB", path, kept>>10, worstKeptHeap>>10)
				}
			}
		})
	}
}
