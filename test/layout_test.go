// Package test holds daemonguard's test bench apart from the product: the local control plane
// (localcluster), the harness that runs daemonguard's components against it, the helpers every
// test on it shares (clustertest: kubectl, the seed DaemonSet, the budget sampler), the webhook
// registration and readiness probes they share (webhookreg), the demo, the admission load
// generator (loadgen), the API server benchmark (apibench), the 1,000-node rollout benchmark
// (rolloutbench) and the benchmark of `rollout plan` (planbench). layout_test.go checks that the
// shipped binaries link none of it; naming_test.go that every test file needing the local
// control plane, and only those, is named *_cluster_test.go.
package test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/daemonguard/daemonguard"

// TestProductLinksNoBench lists the packages each shipped binary and the release tool link, and
// fails on any package of the bench (test/...) or of the pinned tool builds (internal/toolbin,
// which builds the control plane's binaries): the product must build and run without them.
func TestProductLinksNoBench(t *testing.T) {
	for name, tc := range map[string]struct {
		pkg       string
		forbidden []string // import path prefixes, below the module
	}{
		"the daemonguard binary": {
			pkg: "/cmd/daemonguard", forbidden: []string{"/test/", "/internal/toolbin"},
		},
		"the kubectl plugin": {
			pkg: "/cmd/kubectl-daemonguard", forbidden: []string{"/test/", "/internal/toolbin"},
		},
		// make image / make chart find ko and helm through toolbin, never through the test
		// cluster.
		"the release tool": {
			pkg: "/cmd/release", forbidden: []string{"/test/"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", module+tc.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", tc.pkg, errText(err))
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 || deps[len(deps)-1] != module+tc.pkg {
				t.Fatalf("go list -deps %s listed %d packages, not ending in the package itself", tc.pkg, len(deps))
			}
			for _, dep := range deps {
				for _, prefix := range tc.forbidden {
					if strings.HasPrefix(dep, module+prefix) {
						t.Errorf("%s links %s", module+tc.pkg, dep)
					}
				}
			}
		})
	}
}

// errText adds what go list wrote to stderr to its exit error.
func errText(err error) string {
	if exit, ok := err.(*exec.ExitError); ok {
		return err.Error() + ": " + strings.TrimSpace(string(exit.Stderr))
	}
	return err.Error()
}
