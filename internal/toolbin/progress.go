package toolbin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// progress reports a running build: a line every `every` with the time elapsed, the packages
// compiled so far out of all the build needs, and how long the same build took last time on this
// machine. It is the io.Writer of `go build -v`, which names each package as it compiles it.
type progress struct {
	log         io.Writer
	what        string // the sets being built
	step, steps int
	last        time.Duration // the last build of the same sets here; 0 when unknown
	every       time.Duration

	mu         sync.Mutex
	began      time.Time
	compiled   int
	downloaded int          // modules, on a machine whose module cache lacks them
	total      int          // packages the build needs, once `go list` has counted them
	partial    []byte       // an unfinished line of go build's output
	other      bytes.Buffer // go build's output other than package names: errors
	done       chan struct{}
	cancel     context.CancelFunc // the count of packages, when the build ends first
	stopped    sync.WaitGroup
}

// title names the build and its place among the builds of this run.
func (p *progress) title() string {
	return fmt.Sprintf("%s (%d of %d)", p.what, p.step, p.steps)
}

// lastTime is the estimate appended to the first line of a build.
func (p *progress) lastTime() string {
	if p.last == 0 {
		return "; this build is new on this machine and can take many minutes"
	}
	return fmt.Sprintf("; last time it took %s", roundDuration(p.last))
}

// start begins reporting, and counts in the background the packages pkgs need.
func (p *progress) start(ctx context.Context, moduleDir string, pkgs []string) {
	p.began = time.Now()
	p.done = make(chan struct{})
	ctx, p.cancel = context.WithCancel(ctx)
	p.stopped.Add(2)
	go func() {
		defer p.stopped.Done()
		if n, err := countPackages(ctx, moduleDir, pkgs); err == nil {
			p.mu.Lock()
			p.total = n
			p.mu.Unlock()
		}
	}()
	go func() {
		defer p.stopped.Done()
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case now := <-t.C:
				p.mu.Lock()
				line := progressLine(p.title(), now.Sub(p.began), p.downloaded, p.compiled, p.total, p.last)
				p.mu.Unlock()
				fmt.Fprintln(p.log, line)
			}
		}
	}()
}

// stop ends reporting and returns the time the build took.
func (p *progress) stop() time.Duration {
	took := time.Since(p.began)
	close(p.done)
	p.cancel()
	p.stopped.Wait()
	return took
}

// Write counts the package names among go build's output and keeps the rest.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.partial = append(p.partial, b...)
	for {
		i := bytes.IndexByte(p.partial, '\n')
		if i < 0 {
			break
		}
		line := p.partial[:i]
		// A package is named alone on its line; errors, "# pkg" headers and "go: downloading"
		// lines have spaces.
		if len(line) > 0 && !bytes.ContainsAny(line, " \t") {
			p.compiled++
		} else {
			if bytes.HasPrefix(line, []byte("go: downloading ")) {
				p.downloaded++
			}
			p.other.Write(line)
			p.other.WriteByte('\n')
		}
		p.partial = p.partial[i+1:]
	}
	return len(b), nil
}

// output is what go build printed besides package names, for an error message.
func (p *progress) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.other.String() + string(p.partial)
}

// progressLine is the line a running build prints.
func progressLine(title string, elapsed time.Duration, downloaded, compiled, total int, last time.Duration) string {
	line := fmt.Sprintf("Still building %s: %s elapsed", title, roundDuration(elapsed))
	if downloaded > 0 {
		line += fmt.Sprintf(", %d modules downloaded", downloaded)
	}
	switch {
	case total > 0:
		line += fmt.Sprintf(", %d of %d packages compiled", compiled, total)
	case compiled > 0:
		line += fmt.Sprintf(", %d packages compiled", compiled)
	}
	if last > 0 {
		line += fmt.Sprintf(", last time it took %s", roundDuration(last))
	}
	return line
}

func roundDuration(d time.Duration) string {
	if d < time.Minute {
		return d.Round(time.Second).String()
	}
	s := d.Round(10 * time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		return strings.TrimSuffix(s, "0s") // 7m0s -> 7m
	}
	return s
}

// countPackages counts the packages, standard library included, that building pkgs compiles on a
// cold cache.
func countPackages(ctx context.Context, moduleDir string, pkgs []string) (int, error) {
	cmd := exec.CommandContext(ctx, "go", append([]string{"list", "-deps"}, pkgs...)...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), goEnv...)
	out, err := cmd.Output()
	if err != nil {
		return 0, err
	}
	return bytes.Count(out, []byte("\n")), nil
}

// buildTimes are the last build times of a module's sets on this machine, by setsKey; a file per
// module, written under the module's lock.
type buildTimes map[string]float64 // seconds

func buildTimesFile(cacheRoot, module string) string {
	return filepath.Join(cacheRoot, module+"-build-times.json")
}

func setsKey(sets []string) string {
	return strings.Join(slices.Sorted(slices.Values(sets)), "+")
}

// readBuildTimes reads the file; a missing or unreadable file only means no estimates.
func readBuildTimes(path string) buildTimes {
	t := buildTimes{}
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, &t)
	}
	return t
}

// estimate is how long building sets took last time: the time of exactly these sets if they were
// built together, else the sum of their own times when all are known (an overestimate: together
// they share packages), else 0.
func estimate(t buildTimes, sets []string) time.Duration {
	if s, ok := t[setsKey(sets)]; ok {
		return time.Duration(s * float64(time.Second))
	}
	var sum float64
	for _, set := range sets {
		s, ok := t[set]
		if !ok || len(sets) == 1 {
			return 0
		}
		sum += s
	}
	return time.Duration(sum * float64(time.Second))
}

func writeBuildTime(path string, sets []string, took time.Duration) error {
	t := readBuildTimes(path)
	t[setsKey(sets)] = took.Seconds()
	data, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
