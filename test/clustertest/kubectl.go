package clustertest

import (
	"context"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Kubectl runs the real kubectl against c, with stdin when it is not empty, and returns its
// stdout. It fails the test when kubectl fails, quoting what kubectl wrote; a test that expects
// kubectl to fail calls TryKubectl.
func Kubectl(t testing.TB, c *localcluster.Cluster, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := c.Kubectl(context.Background(), stdin, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// KubectlResult is what one run of kubectl wrote and how it ended.
type KubectlResult struct {
	Stdout, Stderr string
	// Err is kubectl's exit error, nil when it succeeded.
	Err error
}

// TryKubectl runs the real kubectl against c as Kubectl does but leaves its failure to the test:
// for the tests that expect kubectl to refuse, or to warn.
func TryKubectl(c *localcluster.Cluster, stdin string, args ...string) KubectlResult {
	out, errOut, err := c.Kubectl(context.Background(), stdin, args...)
	return KubectlResult{Stdout: out, Stderr: errOut, Err: err}
}

// KubectlAs runs the real kubectl against c with the credentials of the kubeconfig file
// kubeconfig (a tenant's, say) instead of the cluster's, with stdin when it is not empty, and
// leaves its failure to the test: it returns what kubectl wrote, stdout then stderr, and its exit
// error.
func KubectlAs(c *localcluster.Cluster, kubeconfig, stdin string, args ...string) (string, error) {
	// --kubeconfig wins over the KUBECONFIG that c.Kubectl sets.
	out, errOut, err := c.Kubectl(context.Background(), stdin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	return out + errOut, err
}
