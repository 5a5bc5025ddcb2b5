package peerbench

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for name, tc := range map[string]struct {
		stat    string
		want    time.Duration
		wantErr bool
	}{
		"utime and stime are added and read in ticks of 10ms": {
			stat: "4242 (gatekeeper) S 1 4242 4242 0 -1 4194560 5000 0 0 0 150 25 0 0 20 0 12 0 100 1000 200",
			want: 1750 * time.Millisecond,
		},
		"a command name with spaces and parentheses does not shift the fields": {
			stat: "7 (a) b (c)) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 5 6 7",
			want: 70 * time.Millisecond,
		},
		"a line cut short is refused":         {stat: "7 (x) R 1 2 3", wantErr: true},
		"a line without a command is refused": {stat: "7 x R 1 2 3 4 5 6 7 8 9 10 11 12 13", wantErr: true},
		"a negative tick count is refused":    {stat: "7 (x) R 1 7 7 0 -1 0 0 0 0 0 -3 4 0", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tc.stat))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseStatCPU = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseStatusRSS(t *testing.T) {
	for name, tc := range map[string]struct {
		status  string
		want    int64
		wantErr bool
	}{
		"VmRSS is read in kB":                    {status: "Name:\tgatekeeper\nVmPeak:\t 900 kB\nVmRSS:\t   89124 kB\nThreads:\t12\n", want: 89124 << 10},
		"no VmRSS is an error (a kernel thread)": {status: "Name:\tkthreadd\nThreads:\t1\n", wantErr: true},
		"another unit is an error":               {status: "VmRSS:\t 12 MB\n", wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseStatusRSS([]byte(tc.status))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseStatusRSS = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// The test process's own usage reads as some CPU time and some memory.
func TestReadUsageOfThisProcess(t *testing.T) {
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) { // burn CPU so at least one tick is counted
	}
	u, err := readUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.CPU <= 0 || u.RSS < 1<<20 {
		t.Errorf("readUsage(self) = %+v, want CPU time and at least 1 MiB resident", u)
	}
	if _, err := readUsage(1 << 30); err == nil || !strings.Contains(err.Error(), "process 1073741824") {
		t.Errorf("readUsage of no process: %v, want an error naming it", err)
	}
}
