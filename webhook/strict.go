package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// maxReviewBytes is controller-runtime's request limit (admission.Webhook's maxRequestSize): a
// body that reaches it gets HTTP 413 from either.
const maxReviewBytes = 7 << 20

// reviewBuffers holds the buffers Serve reads bodies into, each used by one request at a
// time: reading every review into a new buffer was, after decoding, the largest allocation that
// daemonguard adds to controller-runtime's own per request.
var reviewBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody bounds the buffers kept in reviewBuffers, so a rare huge review does not stay.
const maxPooledBody = 256 << 10

// readBody reads up to maxReviewBytes+1 bytes of body, into buf when it is large enough. A body
// of known length (the API server sends Content-Length) up to maxPooledBody is read into one
// buffer of that size: io.ReadAll grows its buffer from 512 bytes by copying. A larger one is
// read as it comes, so a client that announces megabytes and sends nothing holds no more memory
// than it sent.
func readBody(body io.Reader, length int64, buf []byte) ([]byte, error) {
	limited := io.LimitReader(body, maxReviewBytes+1)
	if length <= 0 || length > max(maxPooledBody, int64(cap(buf))) {
		return io.ReadAll(limited)
	}
	if int64(cap(buf)) >= length {
		buf = buf[:length]
	} else {
		buf = make([]byte, length)
	}
	if _, err := io.ReadFull(limited, buf); err != nil {
		return nil, err
	}
	// A body longer than its Content-Length (http.Server does not let one through; this does not
	// rely on it) is read on whole.
	var one [1]byte
	if n, _ := limited.Read(one[:]); n == 0 {
		return buf, nil
	}
	rest, err := io.ReadAll(limited)
	return append(append(buf, one[0]), rest...), err
}

// checkReviewType returns the apiVersion and kind of an admission.k8s.io/v1 or v1beta1
// AdmissionReview, as encoding/json reads them, or an error that says what the body is instead.
func checkReviewType(body []byte) (apiVersion, kind string, err error) {
	if apiVersion, kind, ok := reviewHead(body); ok && kind == "AdmissionReview" &&
		(apiVersion == "admission.k8s.io/v1" || apiVersion == "admission.k8s.io/v1beta1") {
		return apiVersion, kind, nil // what every API server sends; anything else gets the full check and its message
	}
	var head struct {
		APIVersion *string `json:"apiVersion"`
		Kind       *string `json:"kind"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return "", "", fmt.Errorf("body is not an AdmissionReview: %v", err)
	}
	if head.Kind == nil || *head.Kind != "AdmissionReview" {
		return "", "", fmt.Errorf("body is not an AdmissionReview (kind %s)", deref(head.Kind))
	}
	if head.APIVersion == nil || (*head.APIVersion != "admission.k8s.io/v1" && *head.APIVersion != "admission.k8s.io/v1beta1") {
		return "", "", fmt.Errorf("AdmissionReview apiVersion %s is not admission.k8s.io/v1 or v1beta1", deref(head.APIVersion))
	}
	return *head.APIVersion, *head.Kind, nil
}

// reviewHead reads the top-level apiVersion and kind of a JSON object without decoding the rest:
// it only tracks string and bracket boundaries, which is several times cheaper than
// json.Unmarshal over a whole AdmissionReview. It answers ok only when the result is certainly
// what json.Unmarshal into a struct would see: the body is one object whose top-level keys match
// "apiVersion" and "kind" (case-insensitively, as encoding/json matches) exactly once each, spelled
// exactly so, with plain string values; no key contains an escape. Anything else (including
// malformed JSON) answers !ok and gets the full check. Syntax errors inside nested values are not
// detected here; controller-runtime's decoder rejects them next.
func reviewHead(body []byte) (apiVersion, kind string, ok bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return "", "", false
	}
	i = skipSpace(body, i+1)
	seenAPIVersion, seenKind := false, false
	for first := true; ; first = false {
		if i >= len(body) {
			return "", "", false
		}
		if body[i] == '}' && first {
			i++
			break
		}
		if body[i] != '"' {
			return "", "", false
		}
		end, escaped := stringEnd(body, i)
		if end < 0 || escaped {
			return "", "", false
		}
		key := body[i+1 : end-1]
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			return "", "", false
		}
		i = skipSpace(body, i+1)
		isAPIVersion, isKind := bytes.EqualFold(key, []byte("apiVersion")), bytes.EqualFold(key, []byte("kind"))
		if isAPIVersion || isKind {
			if (isAPIVersion && (seenAPIVersion || string(key) != "apiVersion")) || (isKind && (seenKind || string(key) != "kind")) {
				return "", "", false
			}
			if i >= len(body) || body[i] != '"' {
				return "", "", false
			}
			vend, vescaped := stringEnd(body, i)
			if vend < 0 || vescaped {
				return "", "", false
			}
			if isAPIVersion {
				apiVersion, seenAPIVersion = string(body[i+1:vend-1]), true
			} else {
				kind, seenKind = string(body[i+1:vend-1]), true
			}
			i = vend
		} else if i = skipValue(body, i); i < 0 {
			return "", "", false
		}
		i = skipSpace(body, i)
		if i >= len(body) {
			return "", "", false
		}
		if body[i] == ',' {
			i = skipSpace(body, i+1)
			continue
		}
		if body[i] != '}' {
			return "", "", false
		}
		i++
		break
	}
	if skipSpace(body, i) != len(body) || !seenAPIVersion || !seenKind {
		return "", "", false
	}
	return apiVersion, kind, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the closing quote of the string starting at b[i] == '"', and
// whether it contains a backslash escape; -1 when unterminated.
func stringEnd(b []byte, i int) (int, bool) {
	escaped := false
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// skipValue returns the index after the JSON value starting at b[i], or -1 when its brackets do not
// balance before the end. Scalars are skipped up to the next delimiter, unchecked.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			end, _ := stringEnd(b, i)
			if end < 0 {
				return -1
			}
			i = end - 1
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object: a scalar ended here
			}
			depth--
		case ',':
			if depth == 0 {
				return i
			}
		}
		if depth == 0 && (b[i] == '}' || b[i] == ']' || b[i] == '"') {
			return i + 1
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}

func deref(s *string) string {
	if s == nil {
		return "missing"
	}
	return fmt.Sprintf("%q", *s)
}
