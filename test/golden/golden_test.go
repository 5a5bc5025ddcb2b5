package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder stands in for a test that Assert fails: it keeps the message and ends the goroutine
// as t.Fatal does.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Helper()      {}
func (r *recorder) Name() string { return "TestOutput/case_one" }
func (r *recorder) Fatal(args ...any) {
	r.failure = fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// assert runs Assert as a test named TestOutput/case_one and returns how it failed, "" if not.
func assert(t *testing.T, path string, got []byte) string {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Assert(r, path, got)
	}()
	<-done
	return r.failure
}

func TestAssert(t *testing.T) {
	const file = "line one\nline two\nline three\n"
	rerun := "UPDATE_GOLDEN=1 go test ./test/golden -run '^TestOutput$'"
	cases := map[string]struct {
		file     *string // nil: no file
		got      string
		update   bool
		wantFail []string // parts of the failure; none: it passes
		wantFile *string  // the file afterwards; nil: no file
	}{
		"the same bytes pass": {file: ptr(file), got: file, wantFile: ptr(file)},
		"a difference fails with the diff and the command that rewrites the file, and keeps the file": {
			file: ptr(file), got: "line one\nline 2\nline three\n",
			wantFail: []string{"differs from the test's output", "-line two\n", "+line 2\n", " line one\n", rerun},
			wantFile: ptr(file),
		},
		"a missing newline at the end is a difference": {
			file: ptr(file), got: strings.TrimSuffix(file, "\n"), wantFail: []string{"differs"}, wantFile: ptr(file),
		},
		"a missing file fails, naming the command that writes it": {
			got: file, wantFail: []string{"no such file", rerun + " writes it"},
		},
		"UPDATE_GOLDEN=1 rewrites a different file": {
			file: ptr(file), got: "new\n", update: true, wantFile: ptr("new\n"),
		},
		"UPDATE_GOLDEN=1 writes a missing file": {got: "new\n", update: true, wantFile: ptr("new\n")},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "out.golden")
			if c.file != nil {
				if err := os.WriteFile(path, []byte(*c.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.update {
				t.Setenv(Update, "1")
			} else {
				t.Setenv(Update, "")
			}
			failure := assert(t, path, []byte(c.got))
			if (failure != "") != (len(c.wantFail) > 0) {
				t.Fatalf("failure %q, want one with %q", failure, c.wantFail)
			}
			for _, part := range c.wantFail {
				if !strings.Contains(failure, part) {
					t.Errorf("failure lacks %q:\n%s", part, failure)
				}
			}
			data, err := os.ReadFile(path)
			switch {
			case c.wantFile == nil && !os.IsNotExist(err):
				t.Errorf("file afterwards: %q, %v; want none", data, err)
			case c.wantFile != nil && (err != nil || string(data) != *c.wantFile):
				t.Errorf("file afterwards: %q, %v; want %q", data, err, *c.wantFile)
			}
		})
	}
}

func ptr(s string) *string { return &s }
