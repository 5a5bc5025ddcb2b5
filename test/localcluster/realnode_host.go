package localcluster

// The real node's footprint on the host, made at start and removed at teardown: its cgroup root,
// the sysctls the kubelet changes, containerd shims, mounts and log links.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// makeCgroupRoot creates the kubelet's cgroupRoot in every cgroup hierarchy: the kubelet requires it
// to exist, and a per-cluster root keeps two nodes' pods apart.
func (n *realNode) makeCgroupRoot() error {
	for _, h := range cgroupHierarchies() {
		if err := os.MkdirAll(filepath.Join(h, n.CgroupRoot), 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", n.CgroupRoot, err)
		}
	}
	return nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies (v1 controllers, and the v2 one).
func cgroupHierarchies() []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var dirs []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 3 && (fields[2] == "cgroup" || fields[2] == "cgroup2") {
			dirs = append(dirs, fields[1])
		}
	}
	return dirs
}

// cleanUpRealNode closes TrustRegistry's forwarders and removes what the stopped node leaves.
func (c *Cluster) cleanUpRealNode() {
	for _, ln := range c.node.forwards {
		ln.Close()
	}
	if err := cleanUpRealNode(c.Dir); err != nil {
		fmt.Fprintf(c.log, "Cleaning up the real node: %v\n", err)
	}
}

// cleanUpRealNode removes what the real node leaves behind once its components are stopped: the pods'
// processes (killed through their cgroups), the containerd shims (which run in process groups of
// their own), the mounts under the node's folder (container root filesystems, pod volumes, pod
// network namespaces), the node's network namespace with its bridge, veth and iptables chains,
// the cgroups and the kubelet's log links. It works from the state file alone, so Reap can run it
// for a cluster whose owner was killed.
func cleanUpRealNode(clusterDir string) error {
	data, err := os.ReadFile(filepath.Join(clusterDir, "node", realNodeStateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the real node's state: %w", err)
	}
	var n realNode
	if err := json.Unmarshal(data, &n); err != nil {
		return fmt.Errorf("parse the real node's state %s: %w", filepath.Join(clusterDir, "node", realNodeStateFile), err)
	}
	n.net = n.Net
	var errs []error
	// Shims first, so none restarts a container; then every process left in the pods' cgroups.
	for range 50 {
		killed := killShims(n.Dir) + n.killCgroupProcs()
		if killed == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	errs = append(errs, unmountUnder(n.Dir))
	n.net.tearDown()
	errs = append(errs, n.removeCgroups(), restoreSysctls(n.Sysctls))
	removeLogLinks(n.Dir)
	return errors.Join(errs...)
}

// kubeletSysctls are the host-wide kernel settings the kubelet sets at start (its
// setupKernelTunables, with protectKernelDefaults off); the others it touches are per network
// namespace and go with the node's.
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

func readSysctls() map[string]string {
	values := map[string]string{}
	for _, name := range kubeletSysctls {
		if data, err := os.ReadFile(filepath.Join("/proc/sys", name)); err == nil {
			values[name] = strings.TrimSpace(string(data))
		}
	}
	return values
}

func restoreSysctls(values map[string]string) error {
	var errs []error
	for name, v := range values {
		if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// killShims SIGKILLs the containerd shims serving this node's containerd (their command line
// names its socket, under the node's folder) and returns how many it found.
func killShims(nodeDir string) int {
	found := 0
	for _, pid := range pidsWhere(func(cmdline string) bool {
		return strings.Contains(cmdline, "containerd-shim") && strings.Contains(cmdline, nodeDir)
	}) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		found++
	}
	return found
}

func pidsWhere(match func(cmdline string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && match(strings.ReplaceAll(string(cmdline), "\x00", " ")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killCgroupProcs SIGKILLs every process in the node's cgroup tree and returns how many it found.
func (n *realNode) killCgroupProcs() int {
	found := 0
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, n.CgroupRoot), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					found++
				}
			}
			return nil
		})
	}
	return found
}

// removeCgroups removes the node's cgroup tree, deepest first.
func (n *realNode) removeCgroups() error {
	var errs []error
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, n.CgroupRoot), func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := removeCgroup(dirs[i]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// removeCgroup retries briefly: a cgroup stays busy until its killed processes are reaped.
func removeCgroup(dir string) error {
	var err error
	for range 50 {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}

// unmountUnder unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) error {
	points := mountPointsUnder(dir)
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// mountPointsUnder lists the mount points at or below dir.
func mountPointsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := unescapeMountPath(f[4]); p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	return points
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeLogLinks removes the kubelet's links in /var/log/containers that point into the node's
// folder: that folder is fixed in the kubelet, unlike the pod logs it links to.
func removeLogLinks(nodeDir string) {
	const dir = "/var/log/containers"
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(target, nodeDir+"/") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// RealNodeLeftovers lists what of the cluster's real node still exists on the host (processes,
// network namespace, veth, cgroups, mounts): for tests that teardown leaves nothing behind. Call it
// after Stop.
func (c *Cluster) RealNodeLeftovers() []string {
	n := c.node
	if n == nil {
		return nil
	}
	var left []string
	if _, err := os.Stat(n.net.NetnsPath()); err == nil {
		left = append(left, "network namespace "+n.net.Netns)
	}
	if _, err := net.InterfaceByName(n.net.hostVeth()); err == nil {
		left = append(left, "veth "+n.net.hostVeth())
	}
	for _, pid := range pidsWhere(func(cmdline string) bool { return strings.Contains(cmdline, n.Dir) }) {
		left = append(left, "process "+strconv.Itoa(pid))
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, n.CgroupRoot)); err == nil {
			left = append(left, "cgroup "+filepath.Join(h, n.CgroupRoot))
		}
	}
	if points := mountPointsUnder(n.Dir); len(points) > 0 {
		left = append(left, "mounts "+strings.Join(points, ", "))
	}
	return left
}
