package clustertest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClockTick is the kernel's USER_HZ, the unit of CPU times in /proc (100 on every Linux this
// runs on).
const ClockTick = 10 * time.Millisecond

// MemoryKiB is a kB field of /proc/PID/status (VmRSS now, VmHWM at its peak), 0 when the process
// or the field is gone: a benchmark reads a process it started.
func MemoryKiB(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return statusKiB(string(data), field)
}

func statusKiB(status, field string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb
		}
	}
	return 0
}

// CPUTime is the user and system CPU time PID has used so far (/proc/PID/stat), 0 when the
// process is gone.
func CPUTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	return statCPU(string(data))
}

func statCPU(stat string) time.Duration {
	// The command name (field 2) is parenthesised and may hold spaces and parens: fields are
	// counted after its last closing paren; utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * ClockTick
}
