package scalebench

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// release is daemonguard installed by helm in URL mode: the chart's objects (RBAC, webhook
// configurations, policies, the OpenReports CRD) in the cluster, its components run on the host
// as the real binary with the arguments and ServiceAccounts the chart gave them.
type release struct {
	*harness.Release
	webhookPort int
}

const (
	releaseName      = "dg"
	releaseNamespace = "daemonguard-system"
	// planIdentity is the ServiceAccount the chart's pre-flight roles are bound to: the plans run
	// with its token.
	planIdentity = "plan"
	// scraper may read the components' metrics.
	scraper = "scraper"
)

// installChart installs the chart with helm: webhooks by URL on loopback, the audit and its
// OpenReports on, the pre-flight roles bound to planIdentity.
func installChart(t testing.TB, c *localcluster.Cluster) *release {
	t.Helper()
	ctx := context.Background()
	if err := c.CreateNamespace(ctx, releaseNamespace); err != nil {
		t.Fatal(err)
	}
	for _, sa := range []string{planIdentity, scraper} {
		if _, err := c.Client.CoreV1().ServiceAccounts(releaseNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	r := &release{Release: harness.NewRelease(c, releaseName, releaseNamespace, filepath.Join(c.Dir, "helm")),
		webhookPort: harness.FreePort(t)}
	chart, err := toolbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := r.Helm("install", r.Name, filepath.Join(chart, "charts", "daemonguard"), "--namespace", r.Namespace,
		"--set", "webhook.url=https://127.0.0.1:"+strconv.Itoa(r.webhookPort),
		"--set", "tls.ipAddresses={127.0.0.1}",
		"--set", "openReports.enabled=true",
		"--set", "webhook.auditInterval="+auditInterval.String(),
		"--set", "preflight.subjects[0].kind=ServiceAccount", "--set", "preflight.subjects[0].name="+planIdentity,
		"--set", "metrics.reader.subjects[0].kind=ServiceAccount", "--set", "metrics.reader.subjects[0].name="+scraper); err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	return r
}

// component is a daemonguard process of the release and what its start took.
type component struct {
	*harness.Component
	started time.Time
	startup time.Duration
}

// runWebhook runs the webhook with bin, serving on the port the chart's configurations point at,
// and returns once it answers ready (informers synced, policies loaded).
func (r *release) runWebhook(t testing.TB, bin string) component {
	t.Helper()
	start := time.Now()
	comp := harness.RunComponentBinary(t, r.Cluster, bin, r.Deployment(t, "-webhook"),
		"--host=127.0.0.1", "--port="+strconv.Itoa(r.webhookPort), "--cert-dir="+t.TempDir())
	return component{Component: comp, started: start, startup: time.Since(start)}
}

// runController runs the rollout controller with bin, its net/http/pprof served at pprofAddr.
func (r *release) runController(t testing.TB, bin, pprofAddr string) component {
	t.Helper()
	start := time.Now()
	comp := harness.RunComponentBinary(t, r.Cluster, bin, r.Deployment(t, "-controller"), "--pprof-bind-address="+pprofAddr)
	return component{Component: comp, started: start, startup: time.Since(start)}
}

// saveHeapProfile writes the heap profile served at pprofAddr to path, for `go tool pprof`.
func saveHeapProfile(pprofAddr, path string) error {
	return saveProfile(pprofAddr, "heap", path, time.Minute)
}

// saveProfile saves the profile that net/http/pprof serves at /debug/pprof/<profile> of pprofAddr
// to path, giving up after timeout.
func saveProfile(pprofAddr, profile, path string, timeout time.Duration) error {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get("http://" + pprofAddr + "/debug/pprof/" + profile)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s profile: %s", profile, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// scrapeToken is a token of the release's metrics reader, for scrape.
func (r *release) scrapeToken(t testing.TB) string {
	t.Helper()
	token, err := harness.Token(context.Background(), r.Cluster.Client, r.Namespace, scraper)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// scrape reads comp's metrics as the release's metrics reader (token from scrapeToken).
func (r *release) scrape(t testing.TB, comp component, token string) []byte {
	t.Helper()
	// The measurement needs the number, not a verified server: the install tests check the TLS.
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // loopback, a measurement
	code, body, err := harness.Scrape(context.Background(), "https://"+comp.MetricsAddr+serving.MetricsPath, token, insecure)
	if err != nil || code != 200 {
		t.Fatalf("scrape %s: %d %v", comp.MetricsAddr, code, err)
	}
	return body
}

// metricValue is the value of the unlabelled metric name in a scrape's body.
func metricValue(body []byte, name string) (float64, bool) {
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// buildBinary builds cmd/daemonguard of this checkout into dir.
func buildBinary(t testing.TB, dir string) string {
	t.Helper()
	root, err := toolbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "daemonguard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/daemonguard")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/daemonguard: %v\n%s", err, out)
	}
	return bin
}

// procStatus reads a kB field of /proc/pid/status (VmRSS, VmHWM) in MiB.
func procStatus(pid int, field string) float64 {
	return float64(clustertest.MemoryKiB(pid, field)) / 1024
}
