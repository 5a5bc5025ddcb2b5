package rolloutbench

import (
	"math"
	"testing"
	"time"
)

func TestCPUFloor(t *testing.T) {
	usage := func(wall time.Duration, cores int, per map[string]float64) cpuUsage {
		u := cpuUsage{wall: wall, all: time.Duration(cores) * wall, perProcess: map[string]time.Duration{}}
		for p, s := range per {
			u.perProcess[p] = time.Duration(s * float64(time.Second))
		}
		return u
	}
	controlPlane := []string{"kube-apiserver", "etcd"}
	tests := []struct {
		name    string
		idle    cpuUsage
		rollout cpuUsage
		want    float64
	}{
		{
			name:    "no idle load: the work over every core",
			idle:    usage(10*time.Second, 2, map[string]float64{}),
			rollout: usage(30*time.Second, 2, map[string]float64{"kube-apiserver": 30, "etcd": 10}),
			want:    20,
		},
		{
			name: "idle load is taken out of the work and of the cores",
			// 0.5 cores idle; 30 s rollout: 15 s of it idle load, 40 - 15 = 25 s of work over 1.5 cores.
			idle:    usage(10*time.Second, 2, map[string]float64{"kube-apiserver": 4, "etcd": 1}),
			rollout: usage(30*time.Second, 2, map[string]float64{"kube-apiserver": 30, "etcd": 10}),
			want:    25 / 1.5,
		},
		{
			name:    "processes outside the control plane do not count",
			idle:    usage(10*time.Second, 2, map[string]float64{"daemonguard": 5}),
			rollout: usage(30*time.Second, 2, map[string]float64{"kube-apiserver": 20, "daemonguard": 30}),
			want:    10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := floorOf(controlPlane, tt.idle, tt.rollout).seconds(); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("floor = %v s, want %v s", got, tt.want)
			}
		})
	}
}
