package realnode

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/selftls"
	"github.com/daemonguard/daemonguard/test/nodeimages"
)

// TestChartOnRealNode is the README's Install section on a real node, TLS self-managed (the
// default): the chart pulled from an OCI registry with the image pinned by digest, in a namespace
// that enforces the restricted Pod Security level. Then, on that one install, what users meet:
// the seed DaemonSet, a denial, the containers as the kernel runs them, the webhook's GC settings,
// a managed rollout of real containers, one gated on what a real container reports to a real
// Prometheus, faults, a helm upgrade of daemonguard itself under write load, and the uninstall.
func TestChartOnRealNode(t *testing.T) {
	needRealNode(t)
	a := getArtifacts(t)
	v1 := a.releases[0]
	in := install(t, a, v1)
	webhooks, controllers := waitChartPods(t, v1.pinned())
	ns := cluster.NewTestNamespace(t)

	t.Run("the API server calls the webhooks through the Service", func(t *testing.T) {
		waitCABundle(t, func(ctx context.Context) ([]byte, error) {
			s, err := cluster.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, fullname+"-webhook-tls", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return s.Data[selftls.KeyCABundle], nil
		})
		checkServiceClientConfig(t)
	})
	t.Run("the seed DaemonSet is injected and runs on the tainted control-plane node", func(t *testing.T) {
		checkSeed(t, ns, nodeimages.AgentV1)
	})
	t.Run("a DaemonSet a policy forbids is denied naming the policy", func(t *testing.T) {
		checkDenied(t, ns)
	})
	t.Run("the containers run as 65532 without capabilities on a read-only root", func(t *testing.T) {
		checkSecurity(t, append(webhooks, controllers...))
	})
	t.Run("the webhook runs with the chart's GC settings", func(t *testing.T) {
		checkGC(t, webhooks, controllers)
	})
	t.Run("a managed rollout of real containers", func(t *testing.T) {
		testManagedRollout(t, a)
	})
	t.Run("a rollout gated on the metrics of the real container", func(t *testing.T) {
		testGatedRollout(t, in)
	})
	t.Run("faults", func(t *testing.T) {
		testFaults(t, a, in)
	})
	t.Run("helm upgrade to a new image fails no admission", func(t *testing.T) {
		v2 := a.releases[1]
		load := startWrites(t, 2)
		start := time.Now()
		// The user's upgrade: the new chart version with the same values file. (--reuse-values
		// would keep the old chart's values, and with them the old image digest.)
		a.mustHelm(t, "upgrade", releaseName, v2.chart.Ref, "--version", v2.chart.Version, "--plain-http",
			"--namespace", releaseNamespace, "-f", in.values, "--wait", "--timeout", "5m")
		t.Logf("helm upgrade to %s --wait took %s", v2.chart.Version, since(start))
		waitChartPods(t, v2.pinned())
		load.finish(t, "the helm upgrade")
	})
	t.Run("helm uninstall leaves nothing that blocks the cluster", func(t *testing.T) {
		checkUninstalled(t, a, ns)
	})
}

// TestCertManagerChartOnRealNode installs the chart with certManager.enabled=true beside
// cert-manager's real controllers and cainjector: the chart's Issuers issue the serving
// certificate, the cainjector puts the CA into the webhook configurations, and the API server
// calls both webhook replicas on the real node through the Service with it.
func TestCertManagerChartOnRealNode(t *testing.T) {
	needRealNode(t)
	a := getArtifacts(t)
	if _, err := cluster.StartCertManager(context.Background()); err != nil {
		t.Fatal(err)
	}
	v1 := a.releases[0]
	install(t, a, v1, "certManager.enabled=true")
	webhooks, _ := waitChartPods(t, v1.pinned())
	waitCABundle(t, func(ctx context.Context) ([]byte, error) {
		s, err := cluster.Client.CoreV1().Secrets(releaseNamespace).Get(ctx, fullname+"-webhook-tls", metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return s.Data["ca.crt"], nil
	})
	checkServiceClientConfig(t)
	for _, p := range webhooks {
		for _, v := range p.Spec.Volumes {
			if v.Name == "tls" && (v.Secret == nil || v.Secret.SecretName != fullname+"-webhook-tls") {
				t.Errorf("webhook pod %s mounts %+v as its TLS, want cert-manager's Secret %s-webhook-tls", p.Name, v.VolumeSource, fullname)
			}
		}
	}
	ns := cluster.NewTestNamespace(t)
	checkSeed(t, ns, nodeimages.AgentV1)
	checkDenied(t, ns)
	load := startWrites(t, 2)
	load.finish(t, "normal operation with cert-manager's certificate")
	checkUninstalled(t, a, ns)
}
