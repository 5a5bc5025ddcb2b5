package webhook

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOversizedReviewIsRefusedWith413 holds the size limit at the handler; the e2e test
// TestOversizedReviewGets413 holds it over TLS against the real server.
func TestOversizedReviewIsRefusedWith413(t *testing.T) {
	h := testHandlers(t)
	object := func(size int) string {
		head := `{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"h","annotations":{"x":"`
		tail := `"}},"spec":{}}`
		return head + strings.Repeat("a", size-len(head)-len(tail)) + tail
	}
	overhead := len(review("apps", "v1", "DaemonSet", "CREATE", ""))
	tests := map[string]struct {
		body    string
		chunked bool // sent without a Content-Length
		want413 bool
	}{
		"a review with an 8 MiB object": {body: review("apps", "v1", "DaemonSet", "CREATE", object(8<<20)), want413: true},
		"a review with an 8 MiB object, chunked": {
			body: review("apps", "v1", "DaemonSet", "CREATE", object(8<<20)), chunked: true, want413: true,
		},
		"a review of exactly the limit":     {body: review("apps", "v1", "DaemonSet", "CREATE", object(ReviewBodyLimit-overhead)), want413: true},
		"a review one byte under the limit": {body: review("apps", "v1", "DaemonSet", "CREATE", object(ReviewBodyLimit-overhead-1))},
		"a review one byte under the limit, chunked": {
			body: review("apps", "v1", "DaemonSet", "CREATE", object(ReviewBodyLimit-overhead-1)), chunked: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for path, ep := range h.Endpoints() {
				var body io.Reader = strings.NewReader(tc.body)
				if tc.chunked {
					body = struct{ io.Reader }{body} // hides the length from httptest
				}
				req := httptest.NewRequest(http.MethodPost, path, body)
				req.Header.Set("Content-Type", "application/json")
				rec := httptest.NewRecorder()
				ep.ServeHTTP(rec, req)
				if !tc.want413 {
					if rec.Code == http.StatusRequestEntityTooLarge || strings.Contains(rec.Body.String(), "too large") {
						t.Errorf("%s: a body under the limit refused: HTTP %d %s", path, rec.Code, rec.Body)
					}
					continue
				}
				var status metav1.Status
				if err := json.Unmarshal(rec.Body.Bytes(), &status); err != nil || status.Kind != "Status" {
					t.Fatalf("%s: HTTP %d, not a Status (%v): %.200s", path, rec.Code, err, rec.Body)
				}
				limit := strconv.Itoa(ReviewBodyLimit)
				if rec.Code != http.StatusRequestEntityTooLarge || status.Code != http.StatusRequestEntityTooLarge || !strings.Contains(status.Message, limit) {
					t.Errorf("%s: HTTP %d, status %+v; want 413 naming the limit %s", path, rec.Code, status, limit)
				}
			}
		})
	}
}
