package localcluster

import (
	"bytes"
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

//go:embed kwokstages/*.yaml
var kwokStages embed.FS

// writeKwokConfig writes kwok's configuration: its options and the stages of kwokstages, extra
// stages after them, and a delay before pods turn Ready when cfg.PodReadyDelay is set.
func (c *Cluster) writeKwokConfig(cfg Config) (string, error) {
	extra, podReadyDelay := cfg.ExtraKwokStages, cfg.PodReadyDelay
	var buf bytes.Buffer
	// Leases keep 1,000 fake nodes alive with a fraction of the status writes; the pod CIDR is wide
	// enough that fake pod IPs never run out at benchmark scale. kwok serves /debug/pprof's index
	// (heap, allocation and goroutine profiles; no CPU profile) on its loopback server address,
	// to see where the fake kubelets' time goes in a large cluster. Pods with UnstartedLabel are
	// disregarded before kwok copies them and matches them against every stage: its one
	// preprocess worker, which every pod event goes through, would otherwise do that work for
	// each of a benchmark's 130,000 unstarted pods only for every stage to exclude it.
	fmt.Fprintf(&buf, `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: 10.128.0.1/12
  disregardStatusWithLabelSelector: %s
  enableDebuggingHandlers: true
  enableProfilingHandler: true
  nodeLeaseDurationSeconds: %d
  nodeLeaseParallelism: 8
  nodePlayStageParallelism: 8
  podPlayStageParallelism: 8
`, UnstartedLabel, int(leaseDuration(cfg.NodeLeaseDuration).Seconds()))
	entries, err := kwokStages.ReadDir("kwokstages")
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		data, err := kwokStages.ReadFile("kwokstages/" + e.Name())
		if err != nil {
			return "", err
		}
		if e.Name() == "pod-ready.yaml" && podReadyDelay > 0 {
			data = bytes.Replace(data, []byte("    kind: Pod\n  selector:"),
				[]byte(fmt.Sprintf("    kind: Pod\n  delay:\n    durationMilliseconds: %d\n  selector:", podReadyDelay.Milliseconds())), 1)
		}
		buf.WriteString("---\n")
		buf.Write(data)
	}
	if len(extra) > 0 {
		buf.WriteString("\n---\n")
		buf.Write(extra)
	}
	path := filepath.Join(c.Dir, "kwok.yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", fmt.Errorf("write kwok config: %w", err)
	}
	return path, nil
}

// leaseDuration is Config.NodeLeaseDuration with its default.
func leaseDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 40 * time.Second
	}
	return d.Round(time.Second)
}

// nodeMonitorGracePeriod is how long the node lifecycle controller waits for a node's lease
// renewal before it marks the node NotReady: kube-controller-manager's default (50 s) for the
// default lease, and the lease duration plus a quarter of it for longer leases, so a node that
// renews every quarter of its lease always has several chances.
func nodeMonitorGracePeriod(lease time.Duration) time.Duration {
	d := leaseDuration(lease)
	return max(50*time.Second, d+d/4)
}
