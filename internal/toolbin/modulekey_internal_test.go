package toolbin

import (
	"os"
	"path/filepath"
	"testing"
)

// A tools module with code of its own (tools/certmanager) is rebuilt when that code changes; a
// module of version pins only keeps its key when its tools.go is edited, so the ~12 minute kube
// build is not repeated for a comment.
func TestModuleKeyFollowsOwnCode(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) { writeFile(t, dir, name, content) }
	write("go.mod", "module x\nrequire a v1\n")
	write("go.sum", "a v1 h1:x\n")
	write("cmd/x/main.go", "package main\n")
	key := func(m toolModule) string {
		t.Helper()
		k, err := moduleKey(dir, m)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	pins := toolModule{dir: "x", ldflags: "-s"}
	own := toolModule{dir: "x", ldflags: "-s", ownCode: true}
	pinsBefore, ownBefore := key(pins), key(own)
	if pinsBefore == ownBefore {
		t.Error("a module's own code is not part of its key")
	}

	write("cmd/x/main.go", "package main\n\nfunc main() {}\n")
	if key(pins) != pinsBefore {
		t.Error("the key of a pins-only module changed with a .go file")
	}
	ownAfter := key(own)
	if ownAfter == ownBefore {
		t.Error("the key did not change with the module's code")
	}
	if key(own) != ownAfter {
		t.Error("key is not stable")
	}

	withFiles := own
	withFiles.files = map[string]moduleFolder{"crds": {module: "example.com/m", dir: "deploy/crds"}}
	if key(withFiles) == ownAfter {
		t.Error("the key did not change with the folders copied next to the binaries")
	}
}

// The binary cache must be rebuilt whenever a pinned version changes, and only then.
func TestModuleKeyFollowsPins(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := toolModule{dir: "x", ldflags: "-s"}
	write("go.mod", "module x\nrequire a v1\n")
	write("go.sum", "a v1 h1:x\n")
	k1, err := moduleKey(dir, m)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := moduleKey(dir, m); again != k1 {
		t.Errorf("key is not stable: %s then %s", k1, again)
	}
	write("go.sum", "a v2 h1:y\n")
	k2, _ := moduleKey(dir, m)
	if k2 == k1 {
		t.Error("key did not change with go.sum")
	}
	m.ldflags = "-s -X v=2"
	if k3, _ := moduleKey(dir, m); k3 == k2 {
		t.Error("key did not change with ldflags")
	}
}

// writeFile writes content to name below dir, making the folders it needs.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
