package release_test

import (
	"os"
	"testing"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// cluster is the local control plane the package's cluster tests share.
var cluster *localcluster.Cluster

// TestMain starts the local control plane the package's cluster tests share, unless -short.
func TestMain(m *testing.M) { os.Exit(localcluster.RunTests(m, localcluster.Config{}, &cluster)) }
