package test

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module's root, seen from this package's directory.
const repoRoot = ".."

// maxREADMELines bounds the landing page: what daemonguard is, the demo, install in a paragraph,
// the status table and links. The reference lives in docs/.
const maxREADMELines = 260

// TestDocsNameWhatExists reads every Markdown file of the repository (testdata and build output
// aside) and fails on each repository path, relative link, heading anchor or make target it
// names that does not exist, with the file and line. A name counts when it is written as code
// (inline or fenced) or as a link target:
//
//   - a path (a word with a slash) whose first element is an entry of the repository's root
//     (`internal/foo`, `charts/daemonguard/values.yaml`, `./test/planbench/`) or of the Markdown
//     file's own directory (`files/x.yaml` beside the chart README, `lib/lib.rego` in policies/)
//     must exist; globs (`charts/*_test.go`) must match a file. Anything else is not a repository
//     path: annotation keys, API groups, other modules' import paths, a user's files in an
//     example. A bare file name (`values.yaml`) is not checked: it could be anyone's.
//   - this module's import paths (github.com/daemonguard/daemonguard/cmd/daemonguard@v1) name
//     the package's directory.
//   - a relative link ([x](docs/x.md), [x](../policies/README.md#sandbox)) must reach a file or
//     directory, and its #anchor a heading of the Markdown file it reaches.
//   - `make TARGET ...` must name targets of the Makefile.
//
// Placeholders (<name>, {a,b}, $VAR, ~/...), elisions (./..., …) and URLs are left alone.
func TestDocsNameWhatExists(t *testing.T) {
	docs := markdownFiles(t)
	if len(docs) == 0 {
		t.Fatal("no Markdown files found")
	}
	targets := makeTargets(t)
	for _, doc := range docs {
		for _, p := range problems(repoRoot, doc, targets) {
			t.Error(p)
		}
	}
}

// TestREADMEIsALandingPage keeps the README short enough to read on arrival.
func TestREADMEIsALandingPage(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, want at most %d: move the reference into docs/ and link it", n, maxREADMELines)
	}
}

// markdownFiles returns the repository's Markdown files, relative to the root, without those in
// testdata (fixtures), bin and tmp (build output, ignored by git), vendor and hidden directories.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || name == "node_modules" || rel == "bin" || rel == "tmp") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".md") {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// makeTargets returns the targets the Makefile defines.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	rule := regexp.MustCompile(`^([A-Za-z0-9_.-]+)\s*:([^=]|$)`)
	for line := range strings.Lines(string(data)) {
		if m := rule.FindStringSubmatch(line); m != nil && !strings.HasPrefix(m[1], ".") {
			targets[m[1]] = true
		}
	}
	if len(targets) == 0 {
		t.Fatal("the Makefile defines no targets")
	}
	return targets
}

var (
	inlineCode = regexp.MustCompile("(`+)(.+?)(`+)")
	// link matches [text](target) and ![alt](target); the target ends at a space or ')'.
	link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// makeCall matches make where a command starts: at the start of the code (after a prompt or
	// variables), or after ;, &&, ||, | or (.
	makeCall = regexp.MustCompile(`(?:^\s*(?:\$\s+)?|[;&|(]\s*)(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*make((?:\s+[^\s;&|#)]+)+)`)
	fence    = regexp.MustCompile("^\\s*(```+|~~~+)")
	lineNum  = regexp.MustCompile(`(:\d+)+$`)
)

// problems returns what doc names that does not exist, each as "doc:line: ...".
func problems(root, doc string, targets map[string]bool) []string {
	f, err := os.Open(filepath.Join(root, doc))
	if err != nil {
		return []string{err.Error()}
	}
	defer f.Close()
	var out []string
	report := func(n int, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: %s", doc, n, fmt.Sprintf(format, args...)))
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var fences fenceTracker
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fences.isFence(line) {
			continue
		}
		var code []string
		if fences.in {
			code = []string{line}
		} else {
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				code = append(code, m[2])
			}
			for _, m := range link.FindAllStringSubmatch(stripInlineCode(line), -1) {
				if msg := checkLink(root, doc, m[1]); msg != "" {
					report(n, "%s", msg)
				}
			}
		}
		for _, c := range code {
			for _, m := range makeCall.FindAllStringSubmatch(c, -1) {
				for _, word := range strings.Fields(m[1]) {
					if strings.HasPrefix(word, "-") || strings.Contains(word, "=") {
						continue // a flag or a variable
					}
					if !regexp.MustCompile(`^[a-z][a-z0-9-]*$`).MatchString(word) {
						break
					}
					if !targets[word] {
						report(n, "names `make %s`, which the Makefile does not define", word)
					}
				}
			}
			for _, field := range strings.Fields(c) {
				if p, ok := repoPath(root, doc, field); ok && !exists(root, p) {
					report(n, "names %s, which does not exist", p)
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		report(0, "%v", err)
	}
	return out
}

// fenceTracker follows fenced code blocks: a fence opened by N backticks (or tildes) closes at a
// line of at least N of the same and nothing else, so a ```diff inside a ````markdown stays code.
type fenceTracker struct {
	in   bool
	mark string
}

// isFence reports whether line opens or closes a fence, and updates the state.
func (f *fenceTracker) isFence(line string) bool {
	m := fence.FindStringSubmatch(line)
	if m == nil {
		return false
	}
	if !f.in {
		f.in, f.mark = true, m[1]
		return true
	}
	trimmed := strings.TrimSpace(line)
	if strings.HasPrefix(trimmed, f.mark) && strings.Trim(trimmed, f.mark[:1]) == "" {
		f.in = false
		return true
	}
	return false
}

// stripInlineCode removes inline code so that links inside it are not read as links.
func stripInlineCode(line string) string {
	return inlineCode.ReplaceAllString(line, "")
}

// repoPath reads a word of code as a repository path and returns it relative to the root, or
// false when it is not one: no path separator, a placeholder, a URL, or a first element that is
// neither an entry of the root nor of the doc's own directory.
func repoPath(root, doc, word string) (string, bool) {
	if strings.Contains(word, "...") || strings.Contains(word, "…") {
		return "", false // ./... and elisions
	}
	word = strings.TrimLeft(word, `"'([`)
	word = strings.TrimRight(word, `"'(),;.:[]`+"`")
	if i := strings.IndexAny(word, "#?"); i >= 0 {
		word = word[:i]
	}
	word = lineNum.ReplaceAllString(word, "")
	if rest, ok := strings.CutPrefix(word, module+"/"); ok {
		if i := strings.Index(rest, "@"); i >= 0 {
			rest = rest[:i]
		}
		return rest, rest != ""
	}
	if !strings.Contains(word, "/") || strings.Contains(word, "://") || strings.ContainsAny(word, "<>{}$~@=|") ||
		strings.HasPrefix(word, "/") {
		return "", false
	}
	word = strings.TrimPrefix(word, "./")
	first, _, _ := strings.Cut(word, "/")
	dir := filepath.Dir(doc)
	if first == ".." {
		p := filepath.ToSlash(filepath.Join(dir, word))
		return p, !strings.HasPrefix(p, "../") && p != ".."
	}
	if first == "" || first == "." {
		return "", false
	}
	if dir != "." && entryExists(root, filepath.Join(dir, first)) {
		return filepath.ToSlash(filepath.Join(dir, word)), true
	}
	if entryExists(root, first) && first != "bin" {
		return filepath.ToSlash(filepath.Clean(word)), true
	}
	return "", false
}

// checkLink returns why a link target of doc is broken, or "".
func checkLink(root, doc, target string) string {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.ContainsAny(target, "<>{}$") {
		return ""
	}
	path, anchor, _ := strings.Cut(target, "#")
	file := doc
	if path != "" {
		file = filepath.ToSlash(filepath.Join(filepath.Dir(doc), path))
		if strings.HasPrefix(file, "../") {
			return fmt.Sprintf("links %s, outside the repository", target)
		}
		if !exists(root, file) {
			return fmt.Sprintf("links %s: %s does not exist", target, file)
		}
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	if !slices.Contains(headingAnchors(root, file), anchor) {
		return fmt.Sprintf("links %s: %s has no heading with anchor #%s", target, file, anchor)
	}
	return ""
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown file.
func headingAnchors(root, file string) []string {
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return nil
	}
	var anchors []string
	seen := map[string]int{}
	var fences fenceTracker
	for line := range strings.Lines(string(data)) {
		if fences.isFence(line) || fences.in || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if k := seen[a]; k > 0 {
			anchors = append(anchors, fmt.Sprintf("%s-%d", a, k))
		} else {
			anchors = append(anchors, a)
		}
		seen[a]++
	}
	return anchors
}

// entryExists reports whether the repository at root has the file or directory rel.
func entryExists(root, rel string) bool {
	_, err := os.Stat(filepath.Join(root, rel))
	return err == nil
}

// exists reports whether rel names a file or directory of the repository, or, with a glob
// pattern, matches one.
func exists(root, rel string) bool {
	if strings.ContainsAny(rel, "*?[") {
		m, _ := filepath.Glob(filepath.Join(root, rel))
		return len(m) > 0
	}
	return entryExists(root, rel)
}

// TestProblemsNamesWhatIsGone runs the checker on a small repository of its own: one sentence of
// Markdown per case, and what the checker must say of it.
func TestProblemsNamesWhatIsGone(t *testing.T) {
	root := t.TempDir()
	for path, content := range map[string]string{
		"Makefile":                        "demo: ## d\n\tgo run .\ntest-unit:\n\tgo test -short ./...\nVAR := x\n",
		"internal/foo/foo.go":             "package foo\n",
		"charts/daemonguard/values.yaml":  "a: 1\n",
		"charts/daemonguard/README.md":    "# Chart\n",
		"charts/chart_test.go":            "package charts\n",
		"docs/x.md":                       "# X\n\n## Pre-flight: `rollout plan`\n\n```\n# not a heading\n```\n",
		"policies/lib/lib.rego":           "package lib\n",
		"testdata/demo/nginx-ds.yaml":     "kind: DaemonSet\n",
		"testdata/argocd/repo/README.md":  "# fixture\n",
		"cmd/daemonguard/main.go":         "package main\n",
		"policies/README.md":              "# Policies\n",
		"docs/development.md":             "# Dev\n",
		"webhook/endpoints.go":            "package webhook\n",
		"controller/rollout/reconcile.go": "package rollout\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	targets := map[string]bool{"demo": true, "test-unit": true}
	for name, tc := range map[string]struct {
		doc  string // the Markdown file, relative to the root
		line string // its one line (or fenced block)
		want string // the problem reported, "" for none
	}{
		"a package that exists":                 {"README.md", "See `internal/foo`.", ""},
		"a package that is gone":                {"README.md", "See `internal/admissionsim`.", "README.md:1: names internal/admissionsim, which does not exist"},
		"a file that is gone":                   {"README.md", "`webhook/review.go` decides", "README.md:1: names webhook/review.go, which does not exist"},
		"a go test argument":                    {"README.md", "`go test -short ./internal/gone/`", "names internal/gone, which does not exist"},
		"a glob that matches":                   {"README.md", "`charts/*_test.go`", ""},
		"a glob that matches nothing":           {"README.md", "`controller/rollout/*_e2e_test.go`", "names controller/rollout/*_e2e_test.go"},
		"a path beside the doc":                 {"charts/daemonguard/README.md", "`values.yaml` and `files/x.yaml`", ""},
		"a gone path beside the doc":            {"policies/README.md", "`lib/strings.rego`", "names policies/lib/strings.rego"},
		"a user's example path":                 {"README.md", "`deploy/node-agent/values.yaml`, `memory_limits/memory_limits.rego`", ""},
		"annotation keys and API groups":        {"README.md", "`status.daemonguard.io/policy-error`, `apps/v1`, `daemonguard.io/node-agents`", ""},
		"other modules and URLs":                {"README.md", "`k8s.io/kubernetes/cmd/kube-apiserver`, `https://github.com/x/y`", ""},
		"this module's import path":             {"README.md", "`github.com/daemonguard/daemonguard/cmd/gone@v1.2.3`", "names cmd/gone"},
		"placeholders and elisions":             {"README.md", "`internal/<name>`, `tools/{kube,helm}`, `./...`, `internal/…`, `$d/bin`", ""},
		"a path in a fenced block":              {"README.md", "```sh\nkubectl apply -f testdata/demo/gone.yaml\n```", "README.md:2: names testdata/demo/gone.yaml"},
		"a path with a line number and anchor":  {"README.md", "```\nDaemonSet default/x (testdata/demo/nginx-ds.yaml#1) at internal/foo/foo.go:12\n```", ""},
		"make targets that exist":               {"README.md", "`make demo`, `make test-unit VAR=1`", ""},
		"a make target that is gone":            {"README.md", "`make bench-old`", "README.md:1: names `make bench-old`, which the Makefile does not define"},
		"make in a fenced command":              {"README.md", "```sh\nGOCACHE=$d make demo gone   # comment\n```", "names `make gone`"},
		"make as a word of output":              {"README.md", "```\nthe pod would make room for others\n```", ""},
		"a relative link":                       {"docs/x.md", "[dev](development.md) and [p](../policies/README.md)", ""},
		"a link that is gone":                   {"docs/x.md", "[install](install.md)", "docs/x.md:1: links install.md: docs/install.md does not exist"},
		"a link to a heading":                   {"README.md", "[plan](docs/x.md#pre-flight-rollout-plan)", ""},
		"a link to a heading that is gone":      {"README.md", "[plan](docs/x.md#not-a-heading)", "docs/x.md has no heading with anchor #not-a-heading"},
		"a link inside code is not a link":      {"README.md", "`[x](gone.md)`", ""},
		"a link out of the repository":          {"README.md", "[up](../other/README.md)", "outside the repository"},
		"a link to a URL":                       {"README.md", "[ko](https://ko.build)", ""},
		"build output is not in the repository": {"README.md", "`bin/release/image`", ""},
	} {
		t.Run(name, func(t *testing.T) {
			doc := filepath.Join(root, tc.doc)
			old, err := os.ReadFile(doc)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if err := os.WriteFile(doc, []byte(tc.line+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			defer func() {
				if old != nil {
					os.WriteFile(doc, old, 0o644)
				} else {
					os.Remove(doc)
				}
			}()
			got := problems(root, tc.doc, targets)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("problems %q, want one containing %q", got, tc.want)
			}
		})
	}
}
