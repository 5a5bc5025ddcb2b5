package clustertest

import (
	"os"
	"testing"
	"time"
)

func TestStatusKiB(t *testing.T) {
	status := "Name:\tdaemonguard\nVmPeak:\t 2000000 kB\nVmHWM:\t  196608 kB\nVmRSS:\t  131072 kB\n"
	for _, tc := range []struct {
		field string
		want  int64
	}{
		{"VmHWM", 196608},
		{"VmRSS", 131072},
		{"VmSwap", 0}, // absent
		{"Vm", 0},     // a prefix of fields is no field
	} {
		if got := statusKiB(status, tc.field); got != tc.want {
			t.Errorf("statusKiB(%s) = %d, want %d", tc.field, got, tc.want)
		}
	}
}

func TestStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
	}{
		{"plain", "42 (daemonguard) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0", 3250 * time.Millisecond},
		{"name with spaces and parens", "42 (a b) c)) R 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 12 0", 30 * time.Millisecond},
		{"truncated", "42 (x) S 1 2", 0},
		{"garbage", "no stat here", 0},
	} {
		if got := statCPU(tc.stat); got != tc.want {
			t.Errorf("%s: statCPU = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// The readers read this very process: it has a resident set and, after a busy loop, CPU time;
// a process that is gone reads as 0.
func TestProcReadersReadALiveProcess(t *testing.T) {
	pid := os.Getpid()
	if rss, peak := MemoryKiB(pid, "VmRSS"), MemoryKiB(pid, "VmHWM"); rss <= 0 || peak < rss {
		t.Errorf("VmRSS %d kB, VmHWM %d kB: want a resident set no larger than its peak", rss, peak)
	}
	// Spin until the reader sees this process's CPU time grow by two clock ticks.
	before, deadline := CPUTime(pid), time.Now().Add(30*time.Second)
	for CPUTime(pid)-before < 2*ClockTick {
		if time.Now().After(deadline) {
			t.Fatalf("CPUTime stayed at %s through 30 s of spinning", before)
		}
	}
	if MemoryKiB(-1, "VmRSS") != 0 || CPUTime(-1) != 0 {
		t.Error("a missing process reads as non-zero")
	}
}
