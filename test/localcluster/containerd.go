package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// containerdConfig renders containerd's configuration for the real node: every path under the
// node's folder, no TCP listener, and the settings this kind of host needs (see realnode.go).
func (n *realNode) containerdConfig() string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # Root here lacks CAP_SYS_RESOURCE: without this, runc fails to lower the container's
  # oom_score_adj ("can't get final child's PID from pipe: EOF").
  restrict_oom_score_adj = true
  # Pod network namespaces live in the node's folder, where teardown finds them.
  netns_mounts_under_state_dir = true
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[5]q
    conf_dir = %[6]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # The host mounts cgroup v1; the kubelet uses the cgroupfs driver.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry]
    # TrustRegistry writes hosts.toml files here.
    config_path = %[7]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[8]q
`, n.path("containerd", "root"), n.path("containerd", "state"), n.containerdSocket(), nodeimages.PauseRef,
		cniBinDir, n.path("cni", "net.d"), n.path("containerd", "certs.d"), n.path("containerd", "opt"))
}

// cniBinDir is where Debian's containernetworking-plugins installs the plugins.
const cniBinDir = "/usr/lib/cni"

func (n *realNode) containerdSocket() string { return n.path("containerd.sock") }

// cniConfig is a bridge with host-local IPAM, then portmap: what the facts of this host need. The
// bridge plugin adds the default route itself; a second one in the IPAM section would fail with
// "file exists".
func (n *realNode) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "daemonguard",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "isDefaultGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "loopback"}
  ]
}
`, n.net.Bridge(), n.net.PodCIDR(), n.path("cni", "ipam"))
}

// ctr runs containerd's own client against the node's containerd in the k8s.io namespace, the one
// the kubelet's CRI uses.
func (n *realNode) ctr(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage imports an image into the real node's containerd, so pods run it without a pull
// (imagePullPolicy Never or IfNotPresent). It also names the image REPO@sha256:DIGEST: containerd
// 1.6's CRI finds an image referenced by digest only through a record of exactly that name, which
// a pull creates and an import does not, so a pod pinned by digest would otherwise fail with
// ErrImageNeverPull although the image is there.
func (c *Cluster) ImportImage(ctx context.Context, img nodeimages.Image) error {
	if c.node == nil {
		return fmt.Errorf("import image %s: the cluster has no real node (Config.RealNode)", img.Ref)
	}
	return c.node.importImage(ctx, img)
}

func (n *realNode) importImage(ctx context.Context, img nodeimages.Image) error {
	if _, err := n.ctr(ctx, "images", "import", "--platform", "linux/amd64", img.Tarball); err != nil {
		return fmt.Errorf("import image %s: %w", img.Ref, err)
	}
	digest, err := n.imageDigest(ctx, img.Ref)
	if err != nil {
		return err
	}
	byDigest := repository(img.Ref) + "@" + digest
	if _, err := n.ctr(ctx, "images", "tag", "--force", img.Ref, byDigest); err != nil {
		return fmt.Errorf("name image %s by digest: %w", img.Ref, err)
	}
	return nil
}

// imageDigest returns the digest of the manifest (or index) an image name points at.
func (n *realNode) imageDigest(ctx context.Context, ref string) (string, error) {
	out, err := n.ctr(ctx, "images", "ls", "name=="+ref)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == ref && strings.HasPrefix(f[2], "sha256:") {
			return f[2], nil
		}
	}
	return "", fmt.Errorf("image %s is not in the node's containerd after its import (ctr images ls: %s)", ref, strings.TrimSpace(out))
}

// repository strips the tag (or digest) from an image reference: "reg:5000/a/b:v1" -> "reg:5000/a/b".
func repository(ref string) string {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref = ref[:i]
	}
	return ref
}

// TrustRegistry lets the real node pull from a plain-HTTP registry listening at hostPort on the
// host's loopback ("127.0.0.1:5000"), under that name, as users' nodes pull from their registry.
// The node lives in a network namespace of its own, where the host's loopback is another one: the
// node's containerd is pointed at the host's address on the node network, where a forwarder (until
// Stop) passes connections on to hostPort. A registry that listens on all addresses is reached there
// directly.
func (c *Cluster) TrustRegistry(hostPort string) error {
	if c.node == nil {
		return fmt.Errorf("trust registry %s: the cluster has no real node (Config.RealNode)", hostPort)
	}
	_, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return fmt.Errorf("trust registry %q: %w", hostPort, err)
	}
	onNodeNetwork := net.JoinHostPort(c.node.net.HostIP(), port)
	if err := c.forward(onNodeNetwork, hostPort); err != nil {
		return fmt.Errorf("trust registry %s: %w", hostPort, err)
	}
	server := "http://" + onNodeNetwork
	dir := c.node.path("containerd", "certs.d", hostPort)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", server, server)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return fmt.Errorf("trust registry %s: %w", hostPort, err)
	}
	return nil
}

// forward passes TCP connections to listen on to target until the cluster stops. When listen is
// taken already (a server on all addresses), that server answers there itself.
func (c *Cluster) forward(listen, target string) error {
	ln, err := net.Listen("tcp", listen)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.node.forwards = append(c.node.forwards, ln)
	c.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return // closed by Stop
			}
			go func() {
				defer in.Close()
				out, err := net.DialTimeout("tcp", target, 5*time.Second)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in) }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
	return nil
}
