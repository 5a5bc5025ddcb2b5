package localcluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// NeedCluster skips a test under -short, where RunTests starts no cluster.
func NeedCluster(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the local control plane; run without -short")
	}
}

// NeedRealNode skips a test under -short, and when this machine cannot run a real node
// (Config.RealNode), naming what is missing: root or Debian's packages.
func NeedRealNode(t testing.TB) {
	t.Helper()
	NeedCluster(t)
	if missing := MissingRealNodeDeps(); missing != "" {
		t.Skipf("a real node needs %s", missing)
	}
}

// Kubectl runs the real kubectl against the cluster, with stdin when it is not empty.
func (c *Cluster) Kubectl(ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = c.Env()
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// NewTestNamespace creates a namespace named after the test, ready for pods and marked for node
// agents (NodeAgentLabels: daemonguard injects there, as in the namespaces an administrator runs
// node agents in), and deletes it when the test ends, so tests sharing a cluster never see each
// other's objects.
func (c *Cluster) NewTestNamespace(t testing.TB) string {
	t.Helper()
	return c.newTestNamespace(t, NodeAgentLabels)
}

// NewTenantNamespace is NewTestNamespace without the node-agents mark: a tenant's namespace,
// where daemonguard validates and pins but injects nothing.
func (c *Cluster) NewTenantNamespace(t testing.TB) string {
	t.Helper()
	return c.newTestNamespace(t, nil)
}

func (c *Cluster) newTestNamespace(t testing.TB, labels map[string]string) string {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 50 {
		name = strings.TrimRight(name[:50], "-")
	}
	if err := c.createFreshNamespace(context.Background(), name, labels, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// pollAttemptTimeout bounds one check of WaitFor.
const pollAttemptTimeout = 30 * time.Second

// WaitFor polls cond until it holds, fails the test when timeout passes (with cond's last
// explanation), and fails at once if a component of the cluster has died. Each call of cond gets
// at most pollAttemptTimeout: a request stuck on a connection the API server dropped (a restart)
// fails that attempt, and the next one asks again, instead of taking the whole wait.
func (c *Cluster) WaitFor(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var reason string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		attempt, cancel := context.WithTimeout(ctx, pollAttemptTimeout)
		defer cancel()
		var ok bool
		ok, reason = cond(attempt)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v (last state: %s)", what, err, reason)
	}
}

// createFreshNamespace creates an empty namespace. One left by an earlier run of the same test
// (go test -count=2, or a run that died before its cleanup) may still exist or be terminating: it is
// deleted, and waited for, so the test never starts among another run's objects.
func (c *Cluster) createFreshNamespace(ctx context.Context, name string, labels map[string]string, timeout time.Duration) error {
	namespaces := c.Client.CoreV1().Namespaces()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		_, err := namespaces.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		switch {
		case err == nil:
			return true, nil
		case !apierrors.IsAlreadyExists(err):
			return false, err
		}
		if err := namespaces.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("create a fresh namespace %s: %w", name, err)
	}
	return c.waitServiceAccount(ctx, name)
}
