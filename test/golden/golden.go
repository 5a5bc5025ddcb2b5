// Package golden holds a test's output to a file checked in beside the test: one definition of
// how the two are compared, how a difference is shown (a unified diff) and how the file is
// rewritten when a change is meant (UPDATE_GOLDEN=1).
package golden

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmezard/go-difflib/difflib"
)

// Update is the environment variable that, set to 1, makes Assert write what it holds.
const Update = "UPDATE_GOLDEN"

// Assert holds got to the file at path. With UPDATE_GOLDEN=1 it writes got there first, so that
// a change that is meant is recorded by running the test once with it. A difference fails the
// test with the unified diff from the file to got and the command that rewrites the file.
func Assert(t testing.TB, path string, got []byte) {
	t.Helper()
	if os.Getenv(Update) == "1" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (%s writes it)", err, rerun(t))
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from the test's output (%s rewrites it if the change is meant):\n%s",
			path, rerun(t), Diff(want, got, path, "got", 3))
	}
}

// Diff is the unified diff from want (named from) to got (named to), with context lines around
// each change.
func Diff(want, got []byte, from, to string, context int) string {
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(want)), B: difflib.SplitLines(string(got)), FromFile: from, ToFile: to, Context: context,
	})
	if err != nil {
		return fmt.Sprintf("(no diff: %v)", err)
	}
	return diff
}

// rerun is the command that runs t's top-level test again with UPDATE_GOLDEN=1: go test runs a
// package's tests in its folder, so the package is that folder, relative to the module's root.
func rerun(t testing.TB) string {
	test, _, _ := strings.Cut(t.Name(), "/")
	return fmt.Sprintf("%s=1 go test ./%s -run '^%s$'", Update, packageDir(), test)
}

func packageDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil {
				return "."
			}
			return filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}
