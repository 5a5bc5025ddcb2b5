package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReviewBodyLimit is the size from which an AdmissionReview body is refused. It is
// controller-runtime's own limit (admission.maxRequestSize, unexported), which admission.Webhook
// enforces after this layer: a review carries at most two objects (old and new), each at most
// 3 MiB, the API server's request body limit (twice etcd's recommended 1.5 MiB, for JSON), and
// less than 1 MiB besides. A body this large does not come from a conforming API server.
const ReviewBodyLimit = 7 << 20

// refuseOversized answers a review body of ReviewBodyLimit bytes or more with HTTP 413 and a
// Status naming the limit, and passes smaller ones to next, labelled as the JSON it answers
// (admission.Webhook sets no Content-Type, which makes the server sniff text/plain).
//
// admission.Webhook alone answers such a body with HTTP 200 and stops reading it, so the server
// hangs up on the rest: HTTP/2 resets the stream, which clients such as curl report as a framing
// error without the answer, and HTTP/1.1 closes the connection under a client still sending. So
// the rest of the body is read and discarded before answering, up to twice the limit in all: a
// client that sends more is cut off rather than served.
func refuseOversized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var read int64
		switch {
		case r.Body == nil || r.Body == http.NoBody || (r.ContentLength >= 0 && r.ContentLength < ReviewBodyLimit):
			next.ServeHTTP(w, r)
			return
		case r.ContentLength < 0:
			// Of unknown length (chunked): read up to the limit to tell.
			head, err := io.ReadAll(io.LimitReader(r.Body, ReviewBodyLimit))
			if err != nil {
				writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("read the review body: %v", err)))
				return
			}
			if len(head) < ReviewBodyLimit {
				r.Body = io.NopCloser(bytes.NewReader(head))
				next.ServeHTTP(w, r)
				return
			}
			read = int64(len(head))
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 2*ReviewBodyLimit-read))
		size := "at least " + strconv.Itoa(ReviewBodyLimit)
		if r.ContentLength >= 0 {
			size = strconv.FormatInt(r.ContentLength, 10)
		}
		writeStatus(w, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
			"the AdmissionReview body of %s bytes is over daemonguard's limit: it must be under %d bytes (7 MiB)", size, ReviewBodyLimit)))
	})
}

// writeStatus answers with a Status, the form the API server answers its own errors in and
// decodes from a webhook that fails.
func writeStatus(w http.ResponseWriter, err *apierrors.StatusError) {
	status := err.ErrStatus
	status.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}
	w.WriteHeader(int(status.Code))
	_ = json.NewEncoder(w).Encode(status)
}
