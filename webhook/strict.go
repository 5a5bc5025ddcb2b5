package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// maxReviewBytes matches controller-runtime's request limit; larger bodies are left to it so the
// caller gets its 413 answer.
const maxReviewBytes = 7 << 20

// StrictReview rejects, with HTTP 400 and a plain message, bodies that declare themselves as
// something other than an admission.k8s.io/v1 or v1beta1 AdmissionReview. controller-runtime
// would otherwise decode an admission.k8s.io/v2 or a kind-less body as v1 and answer it.
func StrictReview(next http.Handler) http.Handler {
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
			if err := checkReviewType(body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func checkReviewType(body []byte) error {
	var head struct {
		APIVersion *string `json:"apiVersion"`
		Kind       *string `json:"kind"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return fmt.Errorf("body is not an AdmissionReview: %v", err)
	}
	if head.Kind == nil || *head.Kind != "AdmissionReview" {
		return fmt.Errorf("body is not an AdmissionReview (kind %s)", deref(head.Kind))
	}
	if head.APIVersion == nil || (*head.APIVersion != "admission.k8s.io/v1" && *head.APIVersion != "admission.k8s.io/v1beta1") {
		return fmt.Errorf("AdmissionReview apiVersion %s is not admission.k8s.io/v1 or v1beta1", deref(head.APIVersion))
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return "missing"
	}
	return fmt.Sprintf("%q", *s)
}
