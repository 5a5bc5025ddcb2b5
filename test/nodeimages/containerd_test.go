package nodeimages

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// containerd is a throwaway containerd daemon of a test, on its own socket, root and state.
type containerd struct {
	dir     string
	address string
}

// startContainerd starts containerd with everything under a new folder; the test's cleanup stops
// it and removes the folder. It skips the test where containerd cannot run.
func startContainerd(t *testing.T) *containerd {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a containerd daemon; not with -short")
	}
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (Debian package containerd)", bin)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd runs as root only")
	}
	// Not t.TempDir: a unix socket path must stay under 108 bytes.
	dir, err := os.MkdirTemp("", "ctrd-")
	if err != nil {
		t.Fatal(err)
	}
	c := &containerd{dir: dir, address: filepath.Join(dir, "containerd.sock")}
	// Without the CRI plugin: this containerd serves ctr only, and binds no port.
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.address, filepath.Join(dir, "opt"))
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("containerd's log:\n%s", log)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove containerd's folder: %v", err)
		}
	})

	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := c.ctr("version"); err == nil {
			return c
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("containerd exited: %v\n%s", err, log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("containerd did not answer within 30 s")
		}
	}
}

// ctr runs ctr against c in the namespace the kubelet uses.
func (c *containerd) ctr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all := append([]string{"--address", c.address, "--namespace", "k8s.io"}, args...)
	out, err := exec.CommandContext(ctx, "ctr", all...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w\n%s", strings.Join(all, " "), err, out)
	}
	return string(out), nil
}

func TestContainerdImportsTheImages(t *testing.T) {
	c := startContainerd(t)
	images := build(t)

	// An image as `make image` leaves it: alone in an OCI layout, recorded as repo:tag@digest.
	agent := readArchive(t, images[1].Tarball).image
	digest, err := agent.Digest()
	if err != nil {
		t.Fatal(err)
	}
	layoutDir := filepath.Join(t.TempDir(), "image")
	p, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(agent); err != nil {
		t.Fatal(err)
	}
	released, err := FromLayout(layoutDir, "127.0.0.1:5000/daemonguard:v0.0.0-test@"+digest.String(), filepath.Join(t.TempDir(), "released.tar"))
	if err != nil {
		t.Fatal(err)
	}

	var want []string
	for _, img := range append(images, released) {
		if _, err := c.ctr("images", "import", "--platform", "linux/amd64", img.Tarball); err != nil {
			t.Fatal(err)
		}
		a := readArchive(t, img.Tarball)
		want = append(want, a.names()...)
	}
	out, err := c.ctr("images", "ls", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	listed := strings.Fields(out)
	for _, name := range want {
		if !slices.Contains(listed, name) {
			t.Errorf("containerd lists no %s after the import; it lists %q", name, listed)
		}
	}
	if !slices.Contains(listed, "127.0.0.1:5000/daemonguard@"+digest.String()) {
		t.Errorf("the released image is not found by digest; containerd lists %q", listed)
	}

	// The crash image, started by its digest name as a kubelet pinned by digest would: it runs as
	// 65532 on a read-only root, then exits 1.
	crash := readArchive(t, images[3].Tarball)
	crashDigest, err := crash.image.Digest()
	if err != nil {
		t.Fatal(err)
	}
	out, err = c.ctr("run", "--rm", "--read-only", "daemonguard.test/node-agent@"+crashDigest.String(), "crash-test")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("the crash image exited with %v, want status 1; output:\n%s", err, out)
	}
	for _, want := range []string{`msg="Started node agent" version=crash`, "uid=65532", "crashed on purpose 1s after start"} {
		if !strings.Contains(out, want) {
			t.Errorf("the crash container's output lacks %q:\n%s", want, out)
		}
	}
}
