package fleet

import (
	"os"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/test/localcluster"
)

// hub is the cluster that runs Argo CD; it is the canary cluster too. The rest start in the test.
var hub *localcluster.Cluster

// started is when the package's TestMain began: the test's runtime is stated with and without
// the hub's start.
var started time.Time

func TestMain(m *testing.M) {
	started = time.Now()
	os.Exit(localcluster.RunTests(m, memberConfig(), &hub))
}

// memberConfig is every cluster of the fleet: three kwok workers, the fewest on which a rollout
// of one node at a time has a first wave, a middle and an end; pods take a second to become
// ready, like a container start.
func memberConfig() localcluster.Config {
	return localcluster.Config{Nodes: localcluster.WorkerNodes("worker", nodesPerCluster), PodReadyDelay: time.Second}
}

const nodesPerCluster = 3
