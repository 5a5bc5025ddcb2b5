package realnode

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// containerProc is a container's main process as the host's /proc shows it: what the kernel
// applies, whatever the pod spec or the runtime reports.
type containerProc struct {
	pid          int
	status       map[string]string // /proc/PID/status, value after the tab
	cmdline      []string
	environ      map[string]string // /proc/PID/environ: what the process started with
	rootOptions  string            // mount options of the container's /
	rootReadOnly bool
}

// containerProcess finds the main process of a container by the ID the kubelet reports
// (containerd://ID): with the cgroupfs driver every process of the container sits in a cgroup
// whose path ends in the ID, and the main one is pid 1 of its pid namespace.
func containerProcess(containerID string) (*containerProc, error) {
	_, id, ok := strings.Cut(containerID, "://")
	if !ok || id == "" {
		return nil, fmt.Errorf("container ID %q is not runtime://ID", containerID)
	}
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	for _, dir := range procs {
		cgroups, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !bytes.Contains(cgroups, []byte("/"+id+"\n")) {
			continue // gone meanwhile, or another container's
		}
		status, err := readStatus(filepath.Join(dir, "status"))
		if err != nil {
			continue
		}
		nspid := strings.Fields(status["NSpid"])
		if len(nspid) < 2 || nspid[len(nspid)-1] != "1" {
			continue // a child of the main process, or not in a pid namespace of its own
		}
		p := &containerProc{status: status}
		if p.pid, err = strconv.Atoi(filepath.Base(dir)); err != nil {
			return nil, err
		}
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			return nil, err
		}
		p.cmdline = strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		environ, err := os.ReadFile(filepath.Join(dir, "environ"))
		if err != nil {
			return nil, err
		}
		p.environ = map[string]string{}
		for _, kv := range strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				p.environ[k] = v
			}
		}
		if p.rootOptions, err = rootMountOptions(filepath.Join(dir, "mountinfo")); err != nil {
			return nil, fmt.Errorf("pid %d: %w", p.pid, err)
		}
		p.rootReadOnly = strings.HasPrefix(p.rootOptions+",", "ro,")
		return p, nil
	}
	return nil, fmt.Errorf("no process on the host runs in container %s", id)
}

func readStatus(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	status := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			status[k] = strings.TrimSpace(v)
		}
	}
	return status, nil
}

// rootMountOptions returns the per-mount options of the process's "/" from its mountinfo
// (proc(5): ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS ...); the last mount of "/" is the visible one.
func rootMountOptions(mountinfo string) (string, error) {
	f, err := os.Open(mountinfo)
	if err != nil {
		return "", err
	}
	defer f.Close()
	options := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 5 && fields[4] == "/" {
			options = fields[5]
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if options == "" {
		return "", fmt.Errorf("%s has no mount of /", mountinfo)
	}
	return options, nil
}
