package rolloutapi

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzStatusCodec feeds arbitrary status annotations to DecodeStatus, the reader of what the
// controller wrote, which the controller itself and the CLI use (go test -fuzz FuzzStatusCodec
// ./internal/rolloutapi/). present selects the keys that are set (bit i: statusKeys[i]), so an
// empty value differs from an absent one. The codec's properties:
//
//   - every error line names a malformed key and quotes its value;
//   - what the reader returns, the writer writes and the reader reads back as the same status
//     (DecodeStatus(EncodeStatus(s)) == s for every s DecodeStatus returns), with no error;
//   - the annotations the writer wrote need no change (StatusChanges is empty).
func FuzzStatusCodec(f *testing.F) {
	add := func(a map[string]string) {
		var present uint16
		values := make([]string, len(statusKeys))
		for i, k := range statusKeys {
			if v, ok := a[k]; ok {
				present |= 1 << i
				values[i] = v
			}
		}
		f.Add(present, values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7], values[8], values[9])
	}
	// What the controller writes (status_test.go's randomStatus), and the spellings of TestDecodeStatus.
	r := rand.New(rand.NewPCG(3, 4))
	for range 10 {
		add(EncodeStatus(randomStatus(r)))
	}
	add(map[string]string{
		StatusRevision: "abc", StatusStep: "x/5: 25%", StatusStepStarted: "yesterday",
		StatusUpdated: "9 of 20", StatusProgress: "9@noon",
	})
	add(map[string]string{StatusStep: "6/5: 25%", StatusUpdated: "-1/5", StatusProgress: "-1@2026-11-23T10:00:00Z"})
	add(map[string]string{StatusStep: "2/3", StatusNextNodes: `a (one zone at a time (now "z"), then by name)`})
	add(map[string]string{StatusStep: "2/3: pause:5m", StatusNextNodes: "a, b", StatusStepStarted: "2026-11-23T11:00:00+01:00"})
	add(map[string]string{StatusNextNodes: "", StatusStep: "1/1: done", StatusProgress: "3@2026-11-23T10:00:00.5Z"})
	add(map[string]string{StatusNextNodes: ", (r)"})
	add(map[string]string{StatusAnalysis: `{"verifiedAt":"2026-11-23T11:00:00.5+01:00","wave":2,"gates":[{"name":"errors","passed":1,"next":"2026-11-23T10:00:30Z","last":{"at":"2026-11-23T10:00:00Z","result":"Passed","message":"ok"}}]}`})
	add(map[string]string{StatusAnalysis: `{"gates":[]}`})
	add(map[string]string{StatusAnalysis: `not json`})
	add(map[string]string{StatusCompletedAt: "2026-11-23T11:00:00.5+01:00"})
	add(map[string]string{StatusCompletedAt: "just now"})
	if len(statusKeys) != 10 {
		f.Fatalf("the target takes 10 values, there are %d status keys", len(statusKeys))
	}
	f.Fuzz(func(t *testing.T, present uint16, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9 string) {
		a := map[string]string{}
		for i, v := range []string{v0, v1, v2, v3, v4, v5, v6, v7, v8, v9} {
			if present&(1<<i) != 0 {
				a[statusKeys[i]] = v
			}
		}
		s, err := DecodeStatus(a)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				key, _, _ := strings.Cut(line, " ")
				v, ok := a[key]
				if !ok || !strings.HasPrefix(line, key+" "+strconv.Quote(v)+": ") {
					t.Fatalf("error line %q names no status key with its value; annotations %q", line, a)
				}
			}
		}
		written := EncodeStatus(s)
		again, err := DecodeStatus(written)
		if err != nil {
			t.Fatalf("%q decoded as %+v, written as %q, which does not decode: %v", a, s, written, err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatalf("%q decoded as\n %+v\nwritten as %q, decoded as\n %+v", a, s, written, again)
		}
		if changes := StatusChanges(written, s); len(changes) != 0 {
			t.Fatalf("%+v written as %q, yet it needs changes %v", s, written, changes)
		}
	})
}
