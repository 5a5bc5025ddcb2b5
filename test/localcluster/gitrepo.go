package localcluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitRepo is a git repository on the host, on branch main, that a test commits to and Argo CD's
// repo server syncs from as a file:// URL (StartArgoCD).
type GitRepo struct {
	t testing.TB
	// Dir is the repository's work tree.
	Dir string
}

// NewGitRepo makes dir, holding the files to commit, a repository on branch main, and commits
// them with msg; it returns the repository and the commit's hash. The test fails when git does.
func NewGitRepo(t testing.TB, dir, msg string) (*GitRepo, string) {
	t.Helper()
	r := &GitRepo{t: t, Dir: dir}
	r.Git("init", "-q", "-b", "main")
	return r, r.Commit(msg)
}

// URL is the repository as an Argo CD source's repoURL.
func (r *GitRepo) URL() string { return "file://" + r.Dir }

// Git runs git in the repository and returns what it printed, failing the test when it fails.
func (r *GitRepo) Git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=daemonguard e2e", "-c", "user.email=e2e@daemonguard.invalid",
		"-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = r.Dir
	// The user's git configuration must not change what the test commits.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Edit replaces old by new in the file rel (slash-separated) of the repository; old must occur
// exactly once.
func (r *GitRepo) Edit(rel, old, new string) {
	r.t.Helper()
	path := filepath.Join(r.Dir, filepath.FromSlash(rel))
	data, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	if n := strings.Count(string(data), old); n != 1 {
		r.t.Fatalf("%s holds %q %d times, want once", rel, old, n)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// Commit commits every change and returns the commit's hash.
func (r *GitRepo) Commit(msg string) string {
	r.t.Helper()
	r.Git("add", "-A")
	r.Git("commit", "-q", "-m", msg)
	return r.Git("rev-parse", "HEAD")
}
