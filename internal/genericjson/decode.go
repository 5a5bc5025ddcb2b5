// Package genericjson decodes a JSON object into the generic value that encoding/json produces
// for an `any` with UseNumber — map[string]any, []any, string, json.Number, bool and nil — in one
// pass and with a fraction of its allocations. It exists because decoding the object of every
// admission request was the largest part of daemonguard's own latency: encoding/json scans a value
// once to find its end and validate it, then again to build it, through reflection.
//
// The result is the same as encoding/json's for every input, errors included (not their
// wording): strings are unescaped alike, invalid UTF-8 and lone surrogates become U+FFFD, a
// repeated key keeps its last value, and nesting deeper than encoding/json's limit is an error.
// decode_test.go holds it to encoding/json on hand-written, random and fuzzed inputs.
package genericjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxDepth is encoding/json's nesting limit (maxNestingDepth in its scanner).
const maxDepth = 10000

// Options say what DecodeObject leaves out.
type Options struct {
	// OmitManagedFields leaves out metadata.managedFields (when metadata is an object), which is
	// still checked for syntax. It is server-side apply's bookkeeping, often the largest part of a
	// stored object, and read by no daemonguard policy or patch.
	OmitManagedFields bool
	// AliasInput makes the strings of the result share raw's memory instead of a copy of it,
	// which saves a copy of the whole input. raw must then not be modified for as long as the
	// result, or any string taken from it, is in use.
	AliasInput bool
}

// DecodeObject decodes raw, one JSON object with nothing but white space around it.
//
// It gives what decoding raw with a json.Decoder (UseNumber) token by token gives: the value of
// each top-level key (and, with OmitManagedFields, of each key of metadata) is decoded by its own
// Decode call, so encoding/json's nesting limit counts from there.
func DecodeObject(raw []byte, opts Options) (map[string]any, error) {
	d := decoders.Get().(*decoder)
	defer d.release()
	d.data, d.i = raw, 0
	if opts.AliasInput {
		d.text = unsafe.String(unsafe.SliceData(raw), len(raw))
	} else {
		d.text = string(raw)
	}
	d.skipSpace()
	if d.i >= len(d.data) || d.data[d.i] != '{' {
		return nil, errors.New("not a JSON object")
	}
	obj, err := d.object(-1, opts.OmitManagedFields, false)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.i != len(d.data) {
		return nil, d.syntaxError("after the object")
	}
	return obj, nil
}

// DecodeValue decodes raw, one JSON value with nothing but white space around it, as json.Unmarshal
// into an `any` with UseNumber would.
func DecodeValue(raw []byte) (any, error) {
	d := decoders.Get().(*decoder)
	defer d.release()
	d.data, d.text, d.i = raw, string(raw), 0
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.skipSpace()
	if d.i != len(d.data) {
		return nil, d.syntaxError("after top-level value")
	}
	return v, nil
}

// decoder holds the input twice: data to scan and text, one copy of it as a string, so that a
// string without escapes is a substring of text and costs no allocation of its own.
type decoder struct {
	data []byte
	text string
	i    int
	// Members and elements of the objects and arrays being decoded, stacked, so that each map
	// and slice is allocated once at its final size.
	keys  []string
	vals  []any
	elems []any
}

// decoders keeps decoders for reuse, so their stacks are grown once, not per object.
var decoders = sync.Pool{New: func() any { return new(decoder) }}

// maxPooledStack bounds the stacks a pooled decoder keeps, so one huge document does not pin
// its memory.
const maxPooledStack = 1 << 12

// release returns d to decoders, holding no reference to what it decoded.
func (d *decoder) release() {
	if cap(d.keys) > maxPooledStack || cap(d.elems) > maxPooledStack {
		return // let the collector have it
	}
	clear(d.keys[:cap(d.keys)])
	clear(d.vals[:cap(d.vals)])
	clear(d.elems[:cap(d.elems)])
	d.data, d.text, d.keys, d.vals, d.elems = nil, "", d.keys[:0], d.vals[:0], d.elems[:0]
	decoders.Put(d)
}

// syntaxError describes the byte at the cursor.
func (d *decoder) syntaxError(context string) error {
	if d.i >= len(d.data) {
		return fmt.Errorf("unexpected end of JSON input %s", context)
	}
	return fmt.Errorf("invalid character %q at offset %d %s", d.data[d.i], d.i, context)
}

// skipSpace moves past white space and reports whether any input is left.
func (d *decoder) skipSpace() bool {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return true
		}
	}
	return false
}

// value decodes the value at the cursor, depth levels of nesting below where encoding/json's
// count starts.
func (d *decoder) value(depth int) (any, error) {
	d.skipSpace()
	if d.i >= len(d.data) {
		return nil, d.syntaxError("looking for the beginning of a value")
	}
	switch c := d.data[d.i]; {
	case c == '{':
		return d.object(depth, false, false)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.string()
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	}
	return nil, d.syntaxError("looking for the beginning of a value")
}

func (d *decoder) literal(word string) error {
	if len(d.data)-d.i < len(word) || d.text[d.i:d.i+len(word)] != word {
		return d.syntaxError("in literal " + word)
	}
	d.i += len(word)
	return nil
}

// object decodes the object at the cursor. depth -1 is the top level, whose member values start
// encoding/json's count afresh (each is a Decode call of its own); so, with managedFields, do the
// member values of metadata. omitManagedFields is passed on to metadata; skipManagedFields drops
// this object's managedFields.
func (d *decoder) object(depth int, omitManagedFields, skipManagedFields bool) (map[string]any, error) {
	childDepth := depth + 1
	if depth < 0 || skipManagedFields {
		childDepth = 0
	} else if childDepth > maxDepth {
		return nil, errors.New("exceeded max depth")
	}
	d.i++ // {
	// On an error the stacks are left as they are: the decoding ends, and release empties them.
	base := len(d.keys)
	d.skipSpace()
	if d.i < len(d.data) && d.data[d.i] == '}' {
		d.i++
		return map[string]any{}, nil
	}
	for {
		d.skipSpace()
		if d.i >= len(d.data) || d.data[d.i] != '"' {
			return nil, d.syntaxError("looking for the beginning of an object key")
		}
		key, err := d.string()
		if err != nil {
			return nil, err
		}
		d.skipSpace()
		if d.i >= len(d.data) || d.data[d.i] != ':' {
			return nil, d.syntaxError("after object key")
		}
		d.i++
		var v any
		switch {
		case skipManagedFields && key == "managedFields":
			if err := d.skip(childDepth); err != nil {
				return nil, err
			}
		case omitManagedFields && depth < 0 && key == "metadata" && d.skipSpace() && d.data[d.i] == '{':
			if v, err = d.object(childDepth, false, true); err != nil {
				return nil, err
			}
		default:
			if v, err = d.value(childDepth); err != nil {
				return nil, err
			}
		}
		if !(skipManagedFields && key == "managedFields") {
			d.keys, d.vals = append(d.keys, key), append(d.vals, v)
		}
		if more, err := d.next('}', "after object key:value pair"); err != nil {
			return nil, err
		} else if !more {
			break
		}
	}
	m := make(map[string]any, len(d.keys)-base)
	for j := base; j < len(d.keys); j++ {
		m[d.keys[j]] = d.vals[j] // in order, so a repeated key keeps its last value
	}
	d.keys, d.vals = d.keys[:base], d.vals[:base]
	return m, nil
}

// next moves past the comma or the closing bracket after a member of an object or array:
// more is true after a comma.
func (d *decoder) next(closing byte, context string) (more bool, err error) {
	d.skipSpace()
	if d.i < len(d.data) && (d.data[d.i] == ',' || d.data[d.i] == closing) {
		d.i++
		return d.data[d.i-1] == ',', nil
	}
	return false, d.syntaxError(context)
}

func (d *decoder) array(depth int) ([]any, error) {
	if depth+1 > maxDepth {
		return nil, errors.New("exceeded max depth")
	}
	d.i++ // [
	base := len(d.elems)
	d.skipSpace()
	if d.i < len(d.data) && d.data[d.i] == ']' {
		d.i++
		return []any{}, nil
	}
	for {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		d.elems = append(d.elems, v)
		if more, err := d.next(']', "after array element"); err != nil {
			return nil, err
		} else if !more {
			break
		}
	}
	a := append([]any(nil), d.elems[base:]...)
	d.elems = d.elems[:base]
	return a, nil
}

// skip checks the syntax of the value at the cursor and moves past it, building nothing.
func (d *decoder) skip(depth int) error {
	d.skipSpace()
	if d.i >= len(d.data) {
		return d.syntaxError("looking for the beginning of a value")
	}
	switch c := d.data[d.i]; {
	case c == '{' || c == '[':
		if depth+1 > maxDepth {
			return errors.New("exceeded max depth")
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		d.i++
		d.skipSpace()
		if d.i < len(d.data) && d.data[d.i] == end {
			d.i++
			return nil
		}
		for {
			if end == '}' {
				d.skipSpace()
				if d.i >= len(d.data) || d.data[d.i] != '"' {
					return d.syntaxError("looking for the beginning of an object key")
				}
				if _, err := d.stringEnd(); err != nil {
					return err
				}
				d.skipSpace()
				if d.i >= len(d.data) || d.data[d.i] != ':' {
					return d.syntaxError("after object key")
				}
				d.i++
			}
			if err := d.skip(depth + 1); err != nil {
				return err
			}
			if more, err := d.next(end, "after a value in an object or array"); !more {
				return err
			}
		}
	case c == '"':
		_, err := d.stringEnd()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		_, err := d.number()
		return err
	case c == 't':
		return d.literal("true")
	case c == 'f':
		return d.literal("false")
	case c == 'n':
		return d.literal("null")
	}
	return d.syntaxError("looking for the beginning of a value")
}

// string decodes the string at the cursor (which is at its opening quote).
func (d *decoder) string() (string, error) {
	start := d.i
	// The common case, printable ASCII and valid UTF-8 without escapes, is a substring of text.
	j := start + 1
	for j < len(d.data) {
		c := d.data[j]
		if c == '"' {
			d.i = j + 1
			return d.text[start+1 : j], nil
		}
		if c == '\\' || c < ' ' {
			break
		}
		if c < utf8.RuneSelf {
			j++
			continue
		}
		r, size := utf8.DecodeRune(d.data[j:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		j += size
	}
	end, err := d.stringEnd()
	if err != nil {
		return "", err
	}
	return unquote(d.data[start+1:end-1], j-start-1), nil
}

// stringEnd checks the syntax of the string at the cursor and moves past it, returning the index
// after its closing quote.
func (d *decoder) stringEnd() (int, error) {
	j := d.i + 1
	for j < len(d.data) {
		switch c := d.data[j]; {
		case c == '"':
			d.i = j + 1
			return d.i, nil
		case c < ' ':
			d.i = j
			return 0, d.syntaxError("in string literal")
		case c == '\\':
			j++
			if j >= len(d.data) {
				d.i = j
				return 0, d.syntaxError("in string escape code")
			}
			switch d.data[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				for k := 1; k <= 4; k++ {
					if j+k >= len(d.data) || !isHex(d.data[j+k]) {
						d.i = min(j+k, len(d.data))
						return 0, d.syntaxError("in \\u hexadecimal character escape")
					}
				}
				j += 5
			default:
				d.i = j
				return 0, d.syntaxError("in string escape code")
			}
		default:
			j++
		}
	}
	d.i = j
	return 0, d.syntaxError("in string literal")
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// unquote unescapes s, the syntactically valid contents of a string literal, whose first plain
// bytes need no unescaping, as encoding/json's unquoteBytes does (it is adapted from there). Runs
// of plain ASCII are copied whole: kubectl's last-applied annotation, a kilobyte of JSON with an
// escaped quote every few bytes, is in every object it applied.
func unquote(s []byte, plain int) string {
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	b = append(b, s[:plain]...)
	for r := plain; r < len(s); {
		switch c := s[r]; {
		case c == '\\':
			r++
			switch s[r] {
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				rr := hex4(s[r+1:])
				r += 5
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(s[r+2:])); dec != unicode.ReplacementChar {
							r += 6
							b = utf8.AppendRune(b, dec)
							continue
						}
					}
					rr = unicode.ReplacementChar
				}
				b = utf8.AppendRune(b, rr)
				continue
			default: // " \ /
				b = append(b, s[r])
			}
			r++
		case c < utf8.RuneSelf:
			e := r + 1
			for e < len(s) && s[e] != '\\' && s[e] < utf8.RuneSelf {
				e++
			}
			b = append(b, s[r:e]...)
			r = e
		default:
			rr, size := utf8.DecodeRune(s[r:])
			r += size
			b = utf8.AppendRune(b, rr) // invalid UTF-8 becomes U+FFFD
		}
	}
	// b is this function's own and never written again.
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// hex4 reads the four hexadecimal digits at the start of s, which stringEnd has checked.
func hex4(s []byte) rune {
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r*16 + rune(c)
	}
	return r
}

// number decodes the number at the cursor as its literal text, checked against JSON's grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *decoder) number() (json.Number, error) {
	start := d.i
	if d.data[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.data) && d.data[d.i] == '0':
		d.i++
	case d.i < len(d.data) && d.data[d.i] >= '1' && d.data[d.i] <= '9':
		d.digits()
	default:
		return "", d.syntaxError("in numeric literal")
	}
	if d.i < len(d.data) && d.data[d.i] == '.' {
		d.i++
		if d.digits() == 0 {
			return "", d.syntaxError("after decimal point in numeric literal")
		}
	}
	if d.i < len(d.data) && (d.data[d.i] == 'e' || d.data[d.i] == 'E') {
		d.i++
		if d.i < len(d.data) && (d.data[d.i] == '+' || d.data[d.i] == '-') {
			d.i++
		}
		if d.digits() == 0 {
			return "", d.syntaxError("in exponent of numeric literal")
		}
	}
	return json.Number(d.text[start:d.i]), nil
}

func (d *decoder) digits() int {
	start := d.i
	for d.i < len(d.data) && d.data[d.i] >= '0' && d.data[d.i] <= '9' {
		d.i++
	}
	return d.i - start
}
