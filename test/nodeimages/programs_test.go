package nodeimages

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// These tests run the programs of the images as host processes: what they do does not depend on
// the container around them.

var (
	programsMu sync.Mutex
	programs   = map[string]string{} // folder -> binary built by this test binary
)

// buildProgram compiles the program in folder name as Build does, once per test binary.
func buildProgram(t *testing.T, name string) string {
	t.Helper()
	programsMu.Lock()
	defer programsMu.Unlock()
	if bin, ok := programs[name]; ok {
		return bin
	}
	if runtime.GOOS != Platform.OS || runtime.GOARCH != Platform.Architecture {
		t.Skipf("the programs are built for %s, this host is %s/%s", Platform, runtime.GOOS, runtime.GOARCH)
	}
	root := toolbin.RepoPath(t)
	bin := filepath.Join(imageDir, "bin", name)
	if err := goBuild(context.Background(), root, "./"+sourceDir+"/"+name, bin); err != nil {
		t.Fatal(err)
	}
	programs[name] = bin
	return bin
}

// process is a started program whose log lines the test reads.
type process struct {
	cmd   *exec.Cmd
	lines chan string // stderr, line by line; closed at EOF
	mu    sync.Mutex
	log   []string // every line read so far
	done  chan struct{}
	err   error // Wait's result once done is closed
}

func start(t *testing.T, bin string, env []string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, lines: make(chan string, 100), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.log = append(p.log, sc.Text())
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitLine returns the first log line matching re.
func (p *process) waitLine(t *testing.T, re *regexp.Regexp) []string {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("the program ended without logging %s; its log:\n%s", re, p.logText())
			}
			if m := re.FindStringSubmatch(line); m != nil {
				return m
			}
		case <-timeout:
			t.Fatalf("the program logged no %s within 10 s; its log:\n%s", re, p.logText())
		}
	}
}

// exitCode waits for the program to end and returns its exit code.
func (p *process) exitCode(t *testing.T) int {
	t.Helper()
	for range p.lines { // drain, so the reader reaches EOF and waits for the process
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("the program did not exit within 15 s; its log:\n%s", p.logText())
	}
	var exit *exec.ExitError
	if errors.As(p.err, &exit) {
		return exit.ExitCode()
	}
	if p.err != nil {
		t.Fatal(p.err)
	}
	return 0
}

func (p *process) logText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.log, "\n")
}

var startedLine = regexp.MustCompile(`msg="Started node agent" version=(\S+) node=(\S+) port=(\d+) uid=`)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

func TestNodeAgentServesAndStopsOnSIGTERM(t *testing.T) {
	bin := buildProgram(t, "nodeagent")
	p := start(t, bin, []string{"NODE_NAME=node-a", "NODE_AGENT_VERSION=v7"}, "--port=0")
	m := p.waitLine(t, startedLine)
	if m[1] != "v7" || m[2] != "node-a" {
		t.Errorf("the start line names version %s and node %s, want v7 and node-a", m[1], m[2])
	}
	base := "http://127.0.0.1:" + m[3]
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, base+path); code != http.StatusOK {
			t.Errorf("GET %s = %d %q, want 200", path, code, body)
		}
	}
	code, body := get(t, base+"/version")
	var version struct{ Version, Node string }
	if err := json.Unmarshal([]byte(body), &version); code != http.StatusOK || err != nil {
		t.Fatalf("GET /version = %d %q (%v)", code, body, err)
	}
	if version.Version != "v7" || version.Node != "node-a" {
		t.Errorf("GET /version = %+v, want v7 on node-a", version)
	}

	if code, body := get(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, `node_agent_record_errors_total{node="node-a",version="v7"} 0`) {
		t.Errorf("GET /metrics = %d %q, want no errors without an error ratio", code, body)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("after SIGTERM the agent exited %d, want 0; its log:\n%s", code, p.logText())
	}
	if !strings.Contains(p.logText(), `msg="Stopped node agent"`) {
		t.Errorf("the agent did not log its stop:\n%s", p.logText())
	}
}

// The agent's counters grow from its start, and the errors are the ratio's share of the records.
func TestNodeAgentReportsErrorsAtItsRatio(t *testing.T) {
	bin := buildProgram(t, "nodeagent")
	p := start(t, bin, []string{"NODE_NAME=node-a", "NODE_AGENT_ERROR_RATIO=0.25"}, "--port=0")
	base := "http://127.0.0.1:" + p.waitLine(t, startedLine)[3]
	sample := regexp.MustCompile(`(?m)^(node_agent_records_total|node_agent_record_errors_total)\{node="node-a",version="dev"\} (\d+)$`)
	read := func() (records, failed int) {
		code, body := get(t, base+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("GET /metrics = %d %q", code, body)
		}
		for _, m := range sample.FindAllStringSubmatch(body, -1) {
			n, _ := strconv.Atoi(m[2])
			if m[1] == "node_agent_records_total" {
				records = n
			} else {
				failed = n
			}
		}
		return records, failed
	}
	deadline := time.Now().Add(10 * time.Second)
	records, failed := read()
	for records < 40 && time.Now().Before(deadline) {
		records, failed = read()
	}
	if records < 40 {
		t.Fatalf("the agent counted %d records in 10s, want at least 40", records)
	}
	if want := records / 4; failed != want {
		t.Errorf("%d of %d records failed, want %d (ratio 0.25)", failed, records, want)
	}
}

func TestNodeAgentCrashesWhenAsked(t *testing.T) {
	bin := buildProgram(t, "nodeagent")
	p := start(t, bin, []string{"NODE_AGENT_CRASH_AFTER=200ms"}, "--port=0")
	p.waitLine(t, startedLine)
	if code := p.exitCode(t); code != 1 {
		t.Fatalf("the crashing agent exited %d, want 1; its log:\n%s", code, p.logText())
	}
	if !strings.Contains(p.logText(), "crashed on purpose 200ms after start") {
		t.Errorf("the crash is not logged clearly:\n%s", p.logText())
	}
}

func TestNodeAgentRefusesBadOptions(t *testing.T) {
	bin := buildProgram(t, "nodeagent")
	tests := map[string]struct {
		env     []string
		args    []string
		wantLog string
	}{
		"a port that is no number":  {env: []string{"NODE_AGENT_PORT=http"}, wantLog: `NODE_AGENT_PORT=\"http\" is not a port number`},
		"a crash delay that is off": {env: []string{"NODE_AGENT_CRASH_AFTER=soon"}, wantLog: `NODE_AGENT_CRASH_AFTER=\"soon\" is not a duration`},
		"a port out of range":       {args: []string{"--port=70000"}, wantLog: "port 70000 is out of range"},
		"an error ratio above 1":    {env: []string{"NODE_AGENT_ERROR_RATIO=1.5"}, wantLog: "error ratio 1.5 is not from 0 to 1"},
		"a stray argument":          {args: []string{"serve"}, wantLog: "unexpected arguments"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := start(t, bin, tc.env, tc.args...)
			if code := p.exitCode(t); code != 2 {
				t.Fatalf("exited %d, want 2; log:\n%s", code, p.logText())
			}
			if !strings.Contains(p.logText(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, p.logText())
			}
		})
	}
}

func TestPauseWaitsForSIGTERM(t *testing.T) {
	bin := buildProgram(t, "pause")
	for _, sig := range []os.Signal{syscall.SIGTERM, syscall.SIGINT} {
		p := start(t, bin, nil)
		p.waitLine(t, regexp.MustCompile(`^Waiting for SIGTERM or SIGINT$`))
		if err := p.cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		if code := p.exitCode(t); code != 0 {
			t.Errorf("after %s pause exited %d, want 0", sig, code)
		}
	}
}
