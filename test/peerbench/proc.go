package peerbench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// usage is what a webhook process has used: CPU time (user + system, all threads) and resident
// memory. It is read from /proc for all three targets alike, since Gatekeeper answers no stats
// endpoint of ours.
type usage struct {
	CPU time.Duration
	RSS int64 // bytes
}

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on every Linux ABI.
const userHZ = 100

// readUsage reads the usage of process pid.
func readUsage(pid int) (usage, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return usage{}, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return usage{}, fmt.Errorf("read memory of process %d: %w", pid, err)
	}
	rss, err := parseStatusRSS(status)
	if err != nil {
		return usage{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return usage{CPU: cpu, RSS: rss}, nil
}

// parseStatCPU returns utime + stime of a /proc/PID/stat line (fields 14 and 15). The command
// name in field 2 is in parentheses and may hold spaces and parentheses itself, so the fields
// are counted from the last ')'.
func parseStatCPU(stat []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc stat %.80q has no command name", stat)
	}
	fields := strings.Fields(string(stat[end+1:]))
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc stat has %d fields after the command name, want at least 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc stat CPU time %q is not a count of ticks", f)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// parseStatusRSS returns VmRSS of a /proc/PID/status file, in bytes.
func parseStatusRSS(status []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		num, unit, _ := strings.Cut(strings.TrimSpace(rest), " ")
		kb, err := strconv.ParseInt(num, 10, 64)
		if err != nil || kb < 0 || strings.TrimSpace(unit) != "kB" {
			return 0, fmt.Errorf("/proc status VmRSS %q is not a size in kB", strings.TrimSpace(rest))
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("/proc status has no VmRSS line")
}
