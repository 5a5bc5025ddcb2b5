package clustertest

import (
	"context"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Kubectl runs the real kubectl against c, with stdin when it is not empty, and returns its
// stdout. It fails the test when kubectl fails, quoting what kubectl wrote; a test that expects
// kubectl to fail calls c.Kubectl.
func Kubectl(t testing.TB, c *localcluster.Cluster, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := c.Kubectl(context.Background(), stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}
