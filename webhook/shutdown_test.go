package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
)

// A replica that begins to shut down cancels the context controller-runtime's server gives every
// request. Reviews it is still answering must be evaluated to their end, not denied as "could not
// evaluate"; the API server's own deadline (the timeout query parameter) still bounds them.
func TestReviewsInFlightOutliveTheServerShutdown(t *testing.T) {
	h := *testHandlers(t)
	h.Stopping = func() bool { return true } // the process, not the client, ended the requests
	tests := map[string]struct {
		query       string // the query the API server sends
		wantAllowed bool
		wantInMsg   string // part of the denial
	}{
		"the API server's default deadline":     {query: "?timeout=10s", wantAllowed: true},
		"no deadline sent":                      {query: "", wantAllowed: true},
		"an unreadable deadline":                {query: "?timeout=soon", wantAllowed: true},
		"a deadline that passes before it ends": {query: "?timeout=1ns", wantInMsg: "could not evaluate"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			shuttingDown, cancel := context.WithCancel(context.Background())
			cancel()
			body := review("apps", "v1", "DaemonSet", "CREATE", seedObject)
			req := httptest.NewRequest(http.MethodPost, ValidateDaemonSetPath+tc.query, strings.NewReader(body)).WithContext(shuttingDown)
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			h.Endpoints()[ValidateDaemonSetPath].ServeHTTP(rec, req)
			var ar admissionv1.AdmissionReview
			if err := json.NewDecoder(bytes.NewReader(rec.Body.Bytes())).Decode(&ar); err != nil || ar.Response == nil {
				t.Fatalf("HTTP %d, undecodable review %q: %v", rec.Code, rec.Body.String(), err)
			}
			msg := ""
			if ar.Response.Result != nil {
				msg = ar.Response.Result.Message
			}
			if ar.Response.Allowed != tc.wantAllowed || !strings.Contains(msg, tc.wantInMsg) {
				t.Errorf("allowed = %v (%q), want allowed = %v with %q", ar.Response.Allowed, msg, tc.wantAllowed, tc.wantInMsg)
			}
		})
	}
}
