package rolloutbench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/daemonguard/daemonguard/test/clustertest"
)

// cpuSample is the CPU time used so far by each process of interest and by the whole machine.
type cpuSample struct {
	perProcess map[string]time.Duration
	busy, all  time.Duration // every CPU of the machine: busy (not idle or iowait) and total
}

// sampleCPU reads the user+system CPU time of the named processes and of the machine.
func sampleCPU(pids map[string]int) cpuSample {
	s := cpuSample{perProcess: map[string]time.Duration{}}
	for name, pid := range pids {
		s.perProcess[name] = clustertest.CPUTime(pid)
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n") // "cpu  user nice system idle iowait irq softirq steal ..."
		for i, f := range strings.Fields(line)[1:] {
			v, _ := strconv.ParseInt(f, 10, 64)
			d := time.Duration(v) * clustertest.ClockTick
			s.all += d
			if i != 3 && i != 4 {
				s.busy += d
			}
		}
	}
	return s
}

// processName is the kernel's name of a process (at most 15 characters).
func processName(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return strconv.Itoa(pid)
	}
	return strings.TrimSpace(string(data))
}

// cpuUsage is the CPU time each process, the machine and the rest of it used between two samples.
type cpuUsage struct {
	wall       time.Duration
	perProcess map[string]time.Duration
	busy, all  time.Duration
	others     time.Duration // busy time of the machine not used by the processes sampled
}

func usageBetween(a, b cpuSample, wall time.Duration) cpuUsage {
	u := cpuUsage{wall: wall, perProcess: map[string]time.Duration{}, busy: b.busy - a.busy, all: b.all - a.all}
	var ours time.Duration
	for name, d := range b.perProcess {
		u.perProcess[name] = d - a.perProcess[name]
		ours += u.perProcess[name]
	}
	u.others = max(u.busy-ours, 0)
	return u
}

// cpuTable renders the CPU seconds of each process per rollout, with the machine's capacity.
func cpuTable(names []string, order []string, all []cpuUsage) string {
	var b strings.Builder
	b.WriteString(tableHeader("CPU seconds", names))
	for _, p := range order {
		fmt.Fprintf(&b, "%-44s", p)
		for _, u := range all {
			fmt.Fprintf(&b, " %22.1f", u.perProcess[p].Seconds())
		}
		b.WriteString("\n")
	}
	rows := []struct {
		label string
		get   func(cpuUsage) time.Duration
	}{
		{"everything else on the machine", func(u cpuUsage) time.Duration { return u.others }},
		{"machine busy", func(u cpuUsage) time.Duration { return u.busy }},
		{"machine capacity (cores x wall)", func(u cpuUsage) time.Duration { return u.all }},
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "%-44s", r.label)
		for _, u := range all {
			fmt.Fprintf(&b, " %22.1f", r.get(u).Seconds())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// cpuFloor is the shortest wall time in which this machine could do a rollout's control-plane
// work: the CPU the control plane spent on the rollout beyond its idle load, divided by the cores
// left over by that idle load.
//
// Assumptions: the idle load (kwok's heartbeats, leases, resyncs) goes on at the same rate during
// a rollout, and a rollout's work (pod deletions, creations, bindings, status updates and their
// watch events) does not shrink when it runs faster. Any rolling controller, built-in or not,
// makes the control plane replace the same pods, so no controller can finish sooner than this.
type cpuFloor struct {
	work, idleRate, cores float64 // CPU seconds, cores busy when idle, cores of the machine
}

func (f cpuFloor) seconds() float64 { return f.work / (f.cores - f.idleRate) }

func floorOf(controlPlane []string, idle, rollout cpuUsage) cpuFloor {
	f := cpuFloor{cores: rollout.all.Seconds() / rollout.wall.Seconds()}
	for _, p := range controlPlane {
		rate := idle.perProcess[p].Seconds() / idle.wall.Seconds()
		f.idleRate += rate
		f.work += rollout.perProcess[p].Seconds() - rate*rollout.wall.Seconds()
	}
	return f
}

// floorTable renders, per rollout, the control plane's idle load, its work for the rollout, and
// the shortest wall time that work allows on this machine, against the ideal.
func floorTable(names, controlPlane []string, idle cpuUsage, all []cpuUsage, ideal time.Duration) string {
	var b strings.Builder
	b.WriteString(tableHeader("control plane CPU floor", names))
	rows := []struct {
		label string
		get   func(cpuFloor, cpuUsage) string
	}{
		{"control plane idle load (cores)", func(f cpuFloor, _ cpuUsage) string { return fmt.Sprintf("%.2f", f.idleRate) }},
		{"control plane work for the rollout (CPU s)", func(f cpuFloor, _ cpuUsage) string { return fmt.Sprintf("%.1f", f.work) }},
		{"shortest wall time that work allows (s)", func(f cpuFloor, _ cpuUsage) string { return fmt.Sprintf("%.1f", f.seconds()) }},
		{"  ... / ideal", func(f cpuFloor, _ cpuUsage) string { return fmt.Sprintf("%.2f", f.seconds()/ideal.Seconds()) }},
		{"measured wall time (s)", func(_ cpuFloor, u cpuUsage) string { return fmt.Sprintf("%.1f", u.wall.Seconds()) }},
	}
	for _, r := range rows {
		fmt.Fprintf(&b, "%-44s", r.label)
		for _, u := range all {
			fmt.Fprintf(&b, " %22s", r.get(floorOf(controlPlane, idle, u), u))
		}
		b.WriteString("\n")
	}
	return b.String()
}
