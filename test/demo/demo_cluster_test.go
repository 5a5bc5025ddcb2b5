package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// TestDemoShowsInjectionDenialAndWarning runs the demo end to end on its own local cluster: the
// seed reaches the control-plane node through the injected toleration, a wide budget is denied,
// and OnDelete without the rollout controller draws a warning.
func TestDemoShowsInjectionDenialAndWarning(t *testing.T) {
	localcluster.NeedCluster(t)
	var out bytes.Buffer
	err := Run(context.Background(), Options{Out: &out, Repo: toolbin.RepoPath(t), ParentDir: t.TempDir(), Wait: false})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"namespace/default labeled",
		"daemonset.apps/nginx-ds created",
		"DaemonSet default/nginx-ds runs on 5 of 5 nodes (desired 5, current 5, ready 5, up-to-date 5, available 5)",
		"node-role.kubernetes.io/control-plane op=Exists:NoSchedule",
		"template priorityClassName: system-node-critical (pod priority [2000001000])",
		"denied by daemonguard: [rolling_update_budget]",
		"Warning: daemonguard [on_delete_managed]",
		"daemonset.apps/node-exporter created",
		"$ daemonguard rollout status ds/node-agent",
		"ImagePullBackOff",
		"nginx:1.26.1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
}
