package loadgen

import (
	"runtime"
	"syscall"
	"time"
)

// precisePacer dedicates the calling goroutine's OS thread to pacing and sets its timer slack to
// 1ns. The Go runtime rounds sleeps shorter than a millisecond up to about a millisecond whenever
// the process is otherwise idle (its netpoller waits in whole milliseconds), which at 1,000
// requests/s and more would send requests in bursts and add up to a millisecond of pacing error
// to every measured latency. A nanosleep(2) on a thread of its own wakes within tens of
// microseconds without spinning a core. The thread is never unlocked, so it exits with the
// goroutine instead of going back to the runtime with the changed slack.
func precisePacer() {
	runtime.LockOSThread()
	const prSetTimerSlack = 29
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerSlack, 1, 0)
}

// sleep blocks the thread for d with nanosleep(2).
func sleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}

// cpuTime is the CPU time (user+system) the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
