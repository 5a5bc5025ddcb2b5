package inprocess_test

import (
	"context"
	"os"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// cluster is the local control plane the package's cluster tests share: the newest Kubernetes,
// or the one `make test-kubernetes` asks for (localcluster.KubernetesVersionEnv).
var cluster *localcluster.Cluster

// TestMain starts one local cluster for the package.
func TestMain(m *testing.M) { os.Exit(localcluster.RunTests(m, localcluster.Config{}, &cluster)) }

// server is what kubesupport, the one place that decides, reads from the cluster's API server.
func server(t *testing.T) kubesupport.Server {
	t.Helper()
	s, err := kubesupport.Read(context.Background(), cluster.Client.Discovery())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// needInProcessInjection skips a test of the generated policy's behaviour on a server that cannot
// run it, with kubesupport's reason; TestServerRefusesWhereUnsupported covers that side.
func needInProcessInjection(t *testing.T) {
	t.Helper()
	localcluster.NeedCluster(t)
	if err := server(t).InProcessInjection(); err != nil {
		t.Skip(err)
	}
}

// TestServerRefusesWhereUnsupported holds kubesupport's answer to the API server's: the generated
// policy is accepted (a dry-run create) exactly where kubesupport says in-process injection
// works, and refused as an unknown kind elsewhere. It runs on every version of the matrix.
func TestServerRefusesWhereUnsupported(t *testing.T) {
	localcluster.NeedCluster(t)
	s := server(t)
	_, err := cluster.Client.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(context.Background(), generate(t).Policy,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	supported := s.InProcessInjection()
	switch {
	case supported == nil && err != nil:
		t.Fatalf("kubesupport says %s injects in-process, but the server refuses the policy: %v", s.Version, err)
	case supported != nil && err == nil:
		t.Fatalf("kubesupport says %q, but the server accepts the policy", supported)
	case supported != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
		t.Fatalf("the server of %s refuses the policy with %v, want the resource unknown", s.Version, err)
	}
	if s.Version != cluster.KubernetesVersion {
		t.Errorf("kubesupport read version %s, the cluster runs %s", s.Version, cluster.KubernetesVersion)
	}
	t.Logf("%s: in-process injection: %v", s.Version, supported)
}
