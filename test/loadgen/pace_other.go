//go:build !linux

package loadgen

import "time"

// precisePacer does nothing off Linux: pacing uses time.Sleep, whose sub-millisecond precision
// depends on the platform.
func precisePacer() {}

func sleep(d time.Duration) { time.Sleep(d) }

// cpuTime is not measured off Linux.
func cpuTime() time.Duration { return 0 }
