package localcluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one control-plane component running as a child process with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed
	// stopped marks a component stopped on purpose (Cluster.StopComponent): its exit is no
	// failure. Guarded by the Cluster's mutex.
	stopped bool
}

// startProcess starts bin in its own process group, so Stop can signal the component and anything
// it forked at once. Pdeathsig makes the kernel kill the component if the Go process that owns it
// dies without cleaning up (a test binary killed by -timeout, a SIGKILLed demo), which is what keeps
// stray apiservers from outliving a crashed test.
func startProcess(name, bin string, args []string, logDir string) (*process, error) {
	return startProcessEnv(name, bin, args, nil, logDir)
}

// startProcessEnv is startProcess with env as the environment (nil: this process's).
func startProcessEnv(name, bin string, args, env []string, logDir string) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log for %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	// Log files are appended to, so a restarted component's log follows its earlier run.
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exitedErr reports a non-nil error if the process has already exited unless it was stopped on
// purpose, with the end of its log so that a failure in CI explains itself even after the cluster
// folder is gone.
func (p *process) exitedErr() error {
	if p.stopped {
		return nil
	}
	select {
	case <-p.done:
		return &exitError{name: p.name, err: p.waitErr, logPath: p.logPath, tail: tailFile(p.logPath, 2048)}
	default:
		return nil
	}
}

type exitError struct {
	name, logPath, tail string
	err                 error
}

func (e *exitError) Error() string {
	return fmt.Sprintf("%s exited (%v); %s ends with:\n%s", e.name, e.err, e.logPath, e.tail)
}

// portTaken tells a component that lost the race for a port freePorts chose.
func (e *exitError) portTaken() bool {
	return strings.Contains(e.tail, "address already in use")
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// restart starts the command of p again, with the same arguments and environment, logging to
// the same file.
func (p *process) restart() (*process, error) {
	return startProcessEnv(p.name, p.cmd.Path, p.cmd.Args[1:], p.cmd.Env, filepath.Dir(p.logPath))
}

// stop asks the process group to terminate and kills it after grace.
func (p *process) stop(grace time.Duration) {
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
	}
	// A component may have left children behind in its group after it exited itself.
	_ = syscall.Kill(pgid, syscall.SIGKILL)
}

// freePorts asks the kernel for n distinct free loopback ports. Another process could take one
// before the component binds it; the component then fails to start with a bind error in its log.
func freePorts(n int) ([]int, error) {
	// Hold every listener until all are chosen so the kernel does not hand out one port twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pidFileName records the process groups of a running cluster so that `Reap` (make demo-down)
// can clean up after a demo whose owner was killed with SIGKILL on another terminal.
const pidFileName = "pids"

func writePIDs(dir string, procs []*process) error {
	var b []byte
	for _, p := range procs {
		b = strconv.AppendInt(b, int64(p.cmd.Process.Pid), 10)
		b = append(b, '\n')
	}
	return os.WriteFile(filepath.Join(dir, pidFileName), b, 0o644)
}

// Reap kills the process groups recorded in a cluster folder, cleans up after its real node if it
// has one, and removes the folder. It is the
// out-of-band cleanup for a cluster whose owning process cannot run Stop any more.
func Reap(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, pidFileName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read pids of %s: %w", dir, err)
	}
	for _, field := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(field)
		if err != nil || pid <= 1 {
			continue
		}
		// Only kill a process that still belongs to this cluster: its command line names the
		// cluster folder. A recycled pid belongs to someone else.
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	if err := cleanUpRealNode(dir); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
