package webhook

import (
	"encoding/json"
	"slices"
	"unicode/utf8"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// encodePatch returns ops as JSON, byte for byte what encoding/json makes of them (through
// jsonpatch's Operation.MarshalJSON), which controller-runtime would otherwise do for every
// patched response: through reflection, map key sorting and a second compaction pass, that
// was a tenth of the mutating webhook's own time. Values other than the JSON types that patches
// here are built of (nil, bool, string, json.Number, []any, map[string]any) are left to
// encoding/json.
func encodePatch(ops []jsonpatch.Operation) ([]byte, error) {
	if ops == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 256)
	b = append(b, '[')
	for i := range ops {
		if i > 0 {
			b = append(b, ',')
		}
		op := &ops[i]
		b = append(b, `{"op":`...)
		b = appendJSONString(b, op.Operation)
		b = append(b, `,"path":`...)
		b = appendJSONString(b, op.Path)
		// Operation.MarshalJSON writes "value":null for add and replace, and omits a nil value
		// otherwise.
		if op.Value != nil || op.Operation == "add" || op.Operation == "replace" {
			b = append(b, `,"value":`...)
			var ok bool
			if b, ok = appendJSONValue(b, op.Value, 0); !ok {
				return json.Marshal(ops)
			}
		}
		b = append(b, '}')
	}
	return append(b, ']'), nil
}

// withPatch sets resp's patch to the encoded ops, so controller-runtime does not encode them.
func withPatch(resp admission.Response, patch []byte) admission.Response {
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	return resp
}

// maxPatchDepth is deeper than any patch here; a value nested deeper (or one that contains
// itself, which encoding/json reports as an error) is left to encoding/json.
const maxPatchDepth = 100

func appendJSONValue(b []byte, v any, depth int) ([]byte, bool) {
	if depth > maxPatchDepth {
		return b, false
	}
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		if x {
			return append(b, "true"...), true
		}
		return append(b, "false"...), true
	case string:
		return appendJSONString(b, x), true
	case json.Number:
		if !validNumber(string(x)) {
			return b, false // encoding/json's error, or its "0" for "", is left to it
		}
		return append(b, x...), true
	case []any:
		if x == nil {
			return append(b, "null"...), true
		}
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendJSONValue(b, e, depth+1); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		if x == nil {
			return append(b, "null"...), true
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // encoding/json sorts map keys
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			var ok bool
			if b, ok = appendJSONValue(b, x[k], depth+1); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// validNumber reports whether s is a JSON number literal, as encoding/json requires of a
// json.Number it encodes.
func validNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		start := i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		return i - start
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// appendJSONString appends s quoted as encoding/json quotes it with HTML escaping (its default):
// <, > and & as \u003c, \u003e and \u0026, control characters escaped, invalid UTF-8 as \ufffd,
// and U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
