package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	kjson "sigs.k8s.io/json"
)

// Serve returns the HTTP handler of an admission webhook whose requests h answers. It answers every
// body as controller-runtime's admission.Webhook does (same status, same response bytes; h runs
// under admission.Webhook.Handle, with its panic recovery and response checks, and the logger it
// puts in the request's context is built only when used: lazyRequestLogger), with two
// differences:
//
//   - A body that declares itself something other than an admission.k8s.io/v1 or v1beta1
//     AdmissionReview is rejected with HTTP 400 and a plain message. admission.Webhook would
//     decode an admission.k8s.io/v2 or a kind-less body as v1 and answer it.
//   - A review is parsed once. admission.Webhook's codec parses every body twice: a whole
//     encoding/json pass only to find apiVersion and kind, then the decoding proper. That first
//     pass was a quarter of a webhook server's CPU per request; the type check here reads the same
//     two fields from the top level alone (reviewHead) and falls back to the full pass only for
//     bodies it cannot vouch for.
func Serve(h admission.Handler) http.Handler {
	return &reviewServer{webhook: &admission.Webhook{Handler: h, LogConstructor: lazyRequestLogger}, log: logf.Log.WithName("admission")}
}

type reviewServer struct {
	webhook *admission.Webhook
	log     logr.Logger
}

func (s *reviewServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil {
		s.fail(w, http.StatusBadRequest, errors.New("request body is empty"), "bad request")
		return
	}
	buf := reviewBuffers.Get().(*[]byte)
	body, err := readBody(r.Body, r.ContentLength, *buf)
	r.Body.Close()
	defer func() {
		// The handler has returned and the response is written; what was kept of the body is a
		// copy (the decoder copies objects into their RawExtensions), so the buffer can serve the
		// next request.
		if cap(body) <= maxPooledBody {
			*buf = body[:0]
			reviewBuffers.Put(buf)
		}
	}()
	if err != nil {
		http.Error(w, "read admission review: "+err.Error(), http.StatusBadRequest)
		return
	}
	var typeMeta metav1.TypeMeta
	if len(body) <= maxReviewBytes {
		if typeMeta.APIVersion, typeMeta.Kind, err = checkReviewType(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	if len(body) >= maxReviewBytes { // admission.Webhook's limit: a body that reaches it is refused
		s.fail(w, http.StatusRequestEntityTooLarge, fmt.Errorf("request entity is too large; limit is %d bytes", maxReviewBytes), "unable to read the body from the incoming request; limit reached")
		return
	}
	if contentType := r.Header.Get("Content-Type"); contentType != "application/json" {
		s.fail(w, http.StatusBadRequest, fmt.Errorf("contentType=%s, expected application/json", contentType), "unable to process a request with unknown content type")
		return
	}
	req := admission.Request{}
	review := unversionedAdmissionReview{admissionv1.AdmissionReview{Request: &req.AdmissionRequest}}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &review); err != nil {
		s.fail(w, http.StatusBadRequest, decodeReviewError(body, err), "unable to decode the request")
		return
	}
	resp := s.webhook.Handle(r.Context(), req)
	s.write(w, admissionv1.AdmissionReview{TypeMeta: typeMeta, Response: &resp.AdmissionResponse})
}

// unversionedAdmissionReview is the type admission.Webhook decodes reviews into. It is named and
// shaped as there because decoding errors name the type: answers stay the same to the byte.
type unversionedAdmissionReview struct {
	admissionv1.AdmissionReview
}

// decodeReviewError is the error admission.Webhook's codec reports for a body it cannot decode:
// its first pass's, when that pass fails too, else the decoder's.
func decodeReviewError(body []byte, err error) error {
	var kind struct {
		APIVersion string `json:"apiVersion,omitempty"`
		Kind       string `json:"kind,omitempty"`
	}
	if firstErr := json.Unmarshal(body, &kind); firstErr != nil {
		return fmt.Errorf("couldn't get version/kind; json parse error: %v", firstErr)
	}
	return err
}

// fail answers with an AdmissionReview that carries only the error, as admission.Webhook does for
// a request it cannot decode.
func (s *reviewServer) fail(w http.ResponseWriter, code int32, err error, msg string) {
	s.log.Error(err, msg)
	resp := admission.Errored(code, err)
	s.write(w, admissionv1.AdmissionReview{Response: &resp.AdmissionResponse})
}

// write encodes review as admission.Webhook does (its response bytes, HTTP 200 whatever the
// status inside).
func (s *reviewServer) write(w io.Writer, review admissionv1.AdmissionReview) {
	if err := json.NewEncoder(w).Encode(review); err != nil {
		// The review is plain data; what fails is the connection. One more try, as
		// admission.Webhook makes, with only the error.
		s.log.Error(err, "unable to encode and write the response")
		serverError := admission.Errored(http.StatusInternalServerError, err)
		if err := json.NewEncoder(w).Encode(admissionv1.AdmissionReview{Response: &serverError.AdmissionResponse}); err != nil {
			s.log.Error(err, "still unable to encode and write the InternalServerError response")
		}
	}
}
