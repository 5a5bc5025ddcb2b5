package genericjson_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/genericjson"
	"github.com/daemonguard/daemonguard/internal/loadgen/fixture"
)

// reference decodes raw as DecodeObject promises to: with a json.Decoder and UseNumber, token by
// token at the top level and, with omitManagedFields, in metadata, leaving managedFields out
// there. It is what daemonguard's webhook used before this package.
func reference(raw []byte, omitManagedFields bool) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var members func(skipManagedFields bool) (map[string]any, error)
	members = func(skipManagedFields bool) (map[string]any, error) {
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := tok.(string)
			if skipManagedFields && key == "managedFields" {
				var skipped json.RawMessage
				if err := dec.Decode(&skipped); err != nil {
					return nil, err
				}
				delete(obj, key)
				continue
			}
			var v any
			if omitManagedFields && !skipManagedFields && key == "metadata" && nextIsObject(raw, dec.InputOffset()) {
				if _, err := dec.Token(); err != nil {
					return nil, err
				}
				// One level deep: metadata's own members are decoded plainly.
				v, err = members(true)
			} else {
				err = dec.Decode(&v)
			}
			if err != nil {
				return nil, err
			}
			obj[key] = v
		}
		_, err := dec.Token()
		return obj, err
	}
	obj, err := members(false)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the object")
	}
	return obj, nil
}

func nextIsObject(raw []byte, offset int64) bool {
	rest := bytes.TrimLeft(raw[min(int(offset), len(raw)):], " \t\r\n")
	rest = bytes.TrimLeft(bytes.TrimPrefix(rest, []byte(":")), " \t\r\n")
	return len(rest) > 0 && rest[0] == '{'
}

// referenceValue decodes raw as json.Unmarshal into an `any` would, with UseNumber.
func referenceValue(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("data after the value")
	}
	return v, nil
}

// checkValueAlike fails t unless DecodeValue and referenceValue agree on raw.
func checkValueAlike(t testing.TB, raw []byte) {
	t.Helper()
	want, wantErr := referenceValue(raw)
	got, err := genericjson.DecodeValue(raw)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("DecodeValue(%q): error %v, encoding/json's error %v", clip(raw), err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeValue(%q):\n got  %#v\n want %#v", clip(raw), got, want)
	}
}

// checkAlike fails t unless DecodeObject and reference agree on raw: both fail, or both give
// deeply equal values.
func checkAlike(t testing.TB, raw []byte, omit bool) {
	t.Helper()
	want, wantErr := reference(raw, omit)
	for _, alias := range []bool{false, true} {
		got, err := genericjson.DecodeObject(raw, genericjson.Options{OmitManagedFields: omit, AliasInput: alias})
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("DecodeObject(%q, omit %v, alias %v): error %v, encoding/json's error %v", clip(raw), omit, alias, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("DecodeObject(%q, omit %v, alias %v):\n got  %#v\n want %#v", clip(raw), omit, alias, got, want)
		}
	}
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

var handWritten = []string{
	`{}`, ` {} `, "\t{\n}\r\n", `{"a":1}`, `{"a":-0}`, `{"a":-0.0e-0}`, `{"a":1.5E+10}`, `{"a":1e400}`,
	`{"a":123456789012345678901234567890}`, `{"a":0.1,"b":[1,2,3],"c":{"d":null,"e":true,"f":false}}`,
	`{"a":[]}`, `{"a":[[]]}`, `{"a":{}}`, `{"a":[{}, {"b":[]} ]}`, `{"a" : "b" , "c" :[ 1 , 2 ] }`,
	// repeated keys keep the last value
	`{"a":1,"a":2}`, `{"a":{"b":1},"a":{"c":2}}`, `{"metadata":{"name":"x"},"metadata":{"name":"y"}}`,
	// strings
	`{"a":""}`, `{"a":"plain"}`, `{"a":"\"\\\/\b\f\n\r\t"}`, `{"a":"\u00e9\u4e2d\ud83d\ude00"}`,
	`{"a":"\ud83d"}`, `{"a":"\ude00"}`, `{"a":"\ud83dx"}`, `{"a":"\ud83d\u0041"}`, `{"a":"\ud83d\ud83d\ude00"}`,
	`{"a":"é中😀"}`, "{\"a\":\"\xff\"}", "{\"a\":\"x\xc3\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xef\xbf\xbd\"}",
	`{"\u0061":1}`, "{\"\xfe\":1}", `{"a\"b":1}`, `{"a":"\u0000"}`, `{"a":"x\\"}`, `{"a":"\\u1234"}`,
	// managedFields
	`{"metadata":{"name":"x","managedFields":[{"manager":"kubectl","fieldsV1":{"f:spec":{}}}]}}`,
	`{"metadata":{"managedFields":null,"name":"x","managedFields":1}}`,
	`{"metadata":[{"managedFields":1}]}`, `{"metadata":"managedFields"}`, `{"metadata":null}`,
	`{"spec":{"managedFields":1},"metadata":{"labels":{"managedFields":"x"}}}`,
	`{"metadata" : {"managedFields" : [ ] } }`, `{"metadata":{"managedFields":{"a":[1,{"b":"\u00e9"}]}}}`,
	// malformed
	``, ` `, `[]`, `"a"`, `1`, `null`, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{,"a":1}`, `{"a":1 "b":2}`,
	`{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`, `{"a":01}`, `{"a":1.}`, `{"a":.1}`, `{"a":1e}`, `{"a":1e+}`,
	`{"a":-}`, `{"a":+1}`, `{"a":0x10}`, `{"a":NaN}`, `{"a":tru}`, `{"a":truex}`, `{"a":nulll}`, `{"a":True}`,
	`{"a":"x}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\t\"}",
	`{a:1}`, `{'a':1}`, `{"a":1}}`, `{"a":1}{}`, `{"a":1} x`, `{"a":1}[`, `{"a":[1}`, `{"a":{"b":1]}`,
	`{"metadata":{"managedFields":[1,}}`, `{"metadata":{"managedFields":"\q"}}`, `{"metadata":{"managedFields"}}`,
	`{"metadata":{"managedFields":[1]x}}`, `{"metadata":{"managedFields":{"a"}}}`, `{"metadata":{"managedFields":{1:2}}}`,
	"\xef\xbb\xbf{}", "{}\x00", `{"a":1}` + "\u00a0",
}

func TestDecodeObjectMatchesEncodingJSON(t *testing.T) {
	for _, s := range handWritten {
		for _, omit := range []bool{true, false} {
			checkAlike(t, []byte(s), omit)
		}
		checkValueAlike(t, []byte(s))
	}
	for _, s := range []string{`1`, ` -1.5e3 `, `"x"`, `"\u00e9"`, `true`, `null`, `[]`, `[1,"a",{"b":null}]`, `1 2`, `"a" "b"`, `[1]]`, `tru`, `"`, `-`, "\t[ ]\n"} {
		checkValueAlike(t, []byte(s))
	}
}

// TestNestingLimit checks encoding/json's nesting limit: it counts from each top-level member's
// value, and from each of metadata's members when managedFields is left out.
func TestNestingLimit(t *testing.T) {
	nested := func(depth int, open, close string) string {
		return strings.Repeat(open, depth) + strings.Repeat(close, depth)
	}
	for _, depth := range []int{9999, 10000, 10001} {
		for _, shape := range [][2]string{{"[", "]"}, {`{"a":`, "}"}, {`[{"a":`, "}]"}} {
			value := nested(depth, shape[0], shape[1])
			if shape[0] == `{"a":` {
				value = strings.Repeat(shape[0], depth) + "1" + strings.Repeat(shape[1], depth)
			}
			if shape[0] == `[{"a":` {
				value = strings.Repeat(shape[0], depth/2) + "1" + strings.Repeat(shape[1], depth/2)
				if depth%2 == 1 {
					value = "[" + value + "]"
				}
			}
			checkValueAlike(t, []byte(value))
			for _, doc := range []string{
				`{"spec":` + value + `}`,
				`{"metadata":{"labels":` + value + `}}`,
				`{"metadata":{"managedFields":` + value + `}}`,
			} {
				for _, omit := range []bool{true, false} {
					checkAlike(t, []byte(doc), omit)
				}
			}
		}
	}
	// The limit bites exactly past encoding/json's: not a vacuous comparison.
	if _, err := genericjson.DecodeObject([]byte(`{"a":`+nested(10001, "[", "]")+`}`), genericjson.Options{}); err == nil {
		t.Fatal("10,001 levels of nesting were accepted")
	}
	if _, err := genericjson.DecodeObject([]byte(`{"a":`+nested(10000, "[", "]")+`}`), genericjson.Options{}); err != nil {
		t.Fatalf("10,000 levels of nesting: %v", err)
	}
}

// randomDocument writes a random JSON object: nested values, strings with escapes, multi-byte and
// invalid UTF-8, surrogates, numbers in every form, repeated keys, random white space, sometimes
// a metadata with managedFields, and sometimes one corrupted byte.
func randomDocument(r *rand.Rand) []byte {
	var b bytes.Buffer
	space := func() {
		for r.IntN(4) == 0 {
			b.WriteByte(" \t\n\r"[r.IntN(4)])
		}
	}
	keys := []string{"a", "b", "metadata", "managedFields", "spec", "name", "é", `\u0061`, `\"`, "\xff"}
	str := func() {
		b.WriteByte('"')
		for n := r.IntN(8); n > 0; n-- {
			switch r.IntN(12) {
			case 0:
				b.WriteString([]string{`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`}[r.IntN(8)])
			case 1:
				fmt.Fprintf(&b, `\u%04x`, []int{0, 0x41, 0xe9, 0x4e2d, 0xd83d, 0xde00, 0xdbff, 0xdfff, 0xfffd, r.IntN(0x10000)}[r.IntN(10)])
			case 2:
				b.WriteString([]string{"é", "中", "😀", "\xff", "\xc3", "\xed\xa0\x80", "\xef\xbf\xbd", "\xf4\x90\x80\x80"}[r.IntN(8)])
			default:
				b.WriteByte("abcxyz019 -_.:"[r.IntN(14)])
			}
		}
		b.WriteByte('"')
	}
	num := func() {
		b.WriteString([]string{"0", "-0", "1", "-12", "3.25", "1e3", "1E-3", "-0.0e+0", "12345678901234567890", "1e999", "0.000001"}[r.IntN(11)])
	}
	var value func(depth int)
	object := func(depth int, key func()) {
		b.WriteByte('{')
		space()
		for i, n := 0, r.IntN(4); i < n; i++ {
			if i > 0 {
				b.WriteByte(',')
				space()
			}
			key()
			space()
			b.WriteByte(':')
			space()
			value(depth + 1)
			space()
		}
		b.WriteByte('}')
	}
	anyKey := func() {
		if r.IntN(3) == 0 {
			str()
			return
		}
		b.WriteString(`"` + keys[r.IntN(len(keys))] + `"`)
	}
	value = func(depth int) {
		n := 7
		if depth > 4 {
			n = 5 // no more containers
		}
		switch r.IntN(n) {
		case 0:
			str()
		case 1:
			num()
		case 2:
			b.WriteString([]string{"true", "false", "null"}[r.IntN(3)])
		case 3, 4:
			str()
		case 5:
			b.WriteByte('[')
			space()
			for i, m := 0, r.IntN(4); i < m; i++ {
				if i > 0 {
					b.WriteByte(',')
					space()
				}
				value(depth + 1)
				space()
			}
			b.WriteByte(']')
		case 6:
			object(depth, anyKey)
		}
	}
	space()
	object(0, anyKey)
	space()
	doc := b.Bytes()
	if r.IntN(5) == 0 && len(doc) > 0 {
		const corruptions = "{}[]\",:\\x0 \x01\xff"
		doc[r.IntN(len(doc))] = corruptions[r.IntN(len(corruptions))]
	}
	return doc
}

func TestDecodeObjectMatchesOnRandomDocuments(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	n := 50000
	if testing.Short() {
		n = 5000
	}
	failed := 0
	for range n {
		doc := randomDocument(r)
		for _, omit := range []bool{true, false} {
			checkAlike(t, doc, omit)
		}
		checkValueAlike(t, doc)
		if _, err := reference(doc, true); err != nil {
			failed++
		}
	}
	// Both outcomes are exercised: some documents are broken, most are not.
	if failed == 0 || failed > n/2 {
		t.Fatalf("%d of %d random documents were malformed; the generator is off", failed, n)
	}
}

func TestDecodeObjectMatchesOnFixtures(t *testing.T) {
	cases, err := fixture.CasesWith(fixture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		raw := objectOf(t, c.Review)
		for _, omit := range []bool{true, false} {
			checkAlike(t, raw, omit)
		}
		got, err := genericjson.DecodeObject(raw, genericjson.Options{OmitManagedFields: true})
		if err != nil {
			t.Fatal(err)
		}
		if meta, _ := got["metadata"].(map[string]any); meta == nil || meta["namespace"] == nil {
			t.Fatalf("%s: no metadata.namespace in %v", c.Name, got)
		} else if _, ok := meta["managedFields"]; ok {
			t.Fatalf("%s: managedFields kept", c.Name)
		}
	}
}

// objectOf returns request.object of an AdmissionReview.
func objectOf(t testing.TB, review []byte) []byte {
	var r struct {
		Request struct {
			Object json.RawMessage `json:"object"`
		} `json:"request"`
	}
	if err := json.Unmarshal(review, &r); err != nil || len(r.Request.Object) == 0 {
		t.Fatalf("no request.object in the review: %v", err)
	}
	return r.Request.Object
}

func FuzzDecodeObject(f *testing.F) {
	for _, s := range handWritten {
		f.Add([]byte(s), true)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		f.Add(randomDocument(r), r.IntN(2) == 0)
	}
	f.Fuzz(func(t *testing.T, raw []byte, omit bool) {
		checkAlike(t, raw, omit)
		checkValueAlike(t, raw)
	})
}

// Without AliasInput the result owns its strings: changing the input afterwards changes nothing.
// With it, plain strings share the input, as documented.
func TestDecodeObjectCopiesUnlessAliasing(t *testing.T) {
	for _, alias := range []bool{false, true} {
		raw := []byte(`{"name":"abc","escaped":"a\u0062c"}`)
		obj, err := genericjson.DecodeObject(raw, genericjson.Options{AliasInput: alias})
		if err != nil {
			t.Fatal(err)
		}
		name, escaped := obj["name"], obj["escaped"] // before: with aliasing the keys change too
		copy(raw, bytes.Repeat([]byte("x"), len(raw)))
		if escaped != "abc" {
			t.Errorf("alias %v: an unescaped string changed with the input: %q", alias, escaped)
		}
		if changed := name != "abc"; changed != alias {
			t.Errorf("alias %v: a plain string is %q after the input changed", alias, name)
		}
	}
}

// BenchmarkDecodeObject compares DecodeObject with encoding/json on the DaemonSets of the load
// generator's requests, as the API server sends them.
func BenchmarkDecodeObject(b *testing.B) {
	cases, err := fixture.CasesWith(fixture.Options{})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"mutate-daemonset/create", "validate-daemonset/update"} {
		c := fixture.Get(cases, name)
		raw := objectOf(b, c.Review)
		b.Run(name+"/genericjson", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := genericjson.DecodeObject(raw, genericjson.Options{OmitManagedFields: true}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(raw)))
			for b.Loop() {
				if _, err := reference(raw, true); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
