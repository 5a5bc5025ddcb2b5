package admission

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// decodeReference is what decodeObject must come to: the whole object decoded by encoding/json
// (json.Number numbers), then metadata.managedFields deleted.
func decodeReference(raw []byte) (map[string]any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if dec.Decode(&obj) != nil || obj == nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "managedFields")
	}
	return obj, true
}

// FuzzDecodeObjectIsEncodingJSONWithoutManagedFields holds decodeObject to encoding/json: the
// same value for every input but metadata.managedFields, which it leaves out, and an error
// exactly where encoding/json fails.
func FuzzDecodeObjectIsEncodingJSONWithoutManagedFields(f *testing.F) {
	for _, seed := range []string{
		`{"metadata":{"name":"a","managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}]},"spec":{"x":1.50}}`,
		`{"metadata":{"managedFields":1,"managedFields":2,"name":"twice"}}`,
		`{"metadata":{"managedFields":[]},"metadata":{"name":"second wins"}}`,
		`{"metadata":{"name":"b"},"spec":{"managedFields":["kept: not metadata's"]}}`,
		`{"metadata":null}`, `{"metadata":[{"managedFields":1}]}`, `{"metadata":"s"}`, `{"metadata":12345678901234567890}`,
		`{"metadata":{"managedFields":{"broken":}}}`, `{"metadata":{"managedFields":[1,2}}`,
		`{}`, `null`, `[]`, `"s"`, `1`, `true`, ``, `{"a":1} x`, `{"a":1}{"b":2}`, `{"a":[1,{"b":[null,true,"\u00e9"]}]}`,
		`{"a":"\xff"}`, `{"a":1,}`, ` {"a" : 1 } `,
	} {
		f.Add([]byte(seed))
	}
	cases, err := fixture.Cases()
	if err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(c.Review, &review); err != nil {
			f.Fatal(err)
		}
		f.Add(review.Request.Object.Raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, ok := decodeReference(raw)
		got, err := decodeObject(raw)
		if (err == nil) != ok {
			t.Fatalf("decodeObject(%q): error %v, encoding/json decodes it: %v", raw, err, ok)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeObject(%q)\n= %#v\nwant %#v", raw, got, want)
		}
	})
}
