package inprocess_test

import (
	"os"
	"testing"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// cluster is the local control plane the package's cluster tests share.
var cluster *localcluster.Cluster

// TestMain starts one local cluster (real kube-apiserver v1.36.3, which serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy) for the package.
func TestMain(m *testing.M) { os.Exit(localcluster.RunTests(m, localcluster.Config{}, &cluster)) }
