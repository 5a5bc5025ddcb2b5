package webhook

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/daemonguard/daemonguard/internal/loadgen/fixture"
)

// fullDecode is what decodeObject answered before it left managedFields out.
func fullDecode(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatal(err)
	}
	if meta, ok := obj["metadata"].(map[string]any); ok {
		delete(meta, "managedFields")
	}
	return obj
}

func TestDecodeObjectIsTheObjectWithoutManagedFields(t *testing.T) {
	raws := map[string][]byte{
		"odd metadata":            []byte(`{"metadata": "x", "spec": {"n": 1.50}}`),
		"null metadata":           []byte(`{"metadata": null}`),
		"duplicate keys":          []byte(`{"spec": 1, "spec": {"a": [1, 2e3]}, "metadata": {"managedFields": [], "name": "a", "name": "b"}}`),
		"metadata a list":         []byte(`{"metadata": [{"managedFields": 1}]}`),
		"only managedFields":      []byte(`{"metadata": {"managedFields": [{"f:spec": {}}]}}`),
		"empty":                   []byte(`{}`),
		"unicode and big numbers": []byte(`{"metadata": {"annotations": {"a": "\u00e9\n"}}, "spec": {"x": 123456789012345678901234567890}}`),
	}
	cases, err := fixture.CasesWith(fixture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(c.Review, &review); err != nil {
			t.Fatal(err)
		}
		raws[c.Name+" object"] = review.Request.Object.Raw
		if len(review.Request.OldObject.Raw) > 0 {
			raws[c.Name+" old object"] = review.Request.OldObject.Raw
		}
	}
	for name, raw := range raws {
		got, err := decodeObject(raw)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if want := fullDecode(t, raw); !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %v\nwant %v", name, got, want)
		}
	}
}

func TestDecodeObjectRejectsWhatIsNotOneObject(t *testing.T) {
	for _, raw := range []string{``, `null`, `[]`, `"x"`, `1`, `{"a": 1} {"b": 2}`, `{"a": }`, `{"metadata": {"name": }}`, `{"a": 1`} {
		if obj, err := decodeObject([]byte(raw)); err == nil {
			t.Errorf("decodeObject(%q) = %v, want an error", raw, obj)
		}
	}
}
