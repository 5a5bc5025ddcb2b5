package peerbench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/test/loadgen"
	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
	"github.com/daemonguard/daemonguard/test/localcluster"
	"github.com/daemonguard/daemonguard/test/webhookreg"
)

// Gatekeeper names the Gatekeeper target in reports.
const Gatekeeper = "gatekeeper"

// gatekeeperModule is Gatekeeper's module, whose release tools/gatekeeper pins.
const gatekeeperModule = "github.com/open-policy-agent/gatekeeper/v3"

// gatekeeperPath is Gatekeeper's validating webhook.
const gatekeeperPath = "/v1/admit"

// gatekeeperNamespace is where Gatekeeper believes it runs (POD_NAMESPACE): it exempts it and
// writes its status objects there.
const gatekeeperNamespace = "gatekeeper-system"

// gatekeeperPodName is the Pod Gatekeeper believes it runs in (POD_NAME).
const gatekeeperPodName = "gatekeeper-peerbench"

// gatekeeperPod is that Pod, which stays Pending: the cluster has no nodes.
const gatekeeperPod = `apiVersion: v1
kind: Pod
metadata:
  name: ` + gatekeeperPodName + `
  namespace: ` + gatekeeperNamespace + `
spec:
  containers:
    - name: manager
      image: openpolicyagent/gatekeeper
`

// budgetTemplate is the ConstraintTemplate and its constraint.
//
//go:embed testdata/daemonset-budget.yaml
var budgetTemplate string

// gatekeeperProcess is a running Gatekeeper webhook.
type gatekeeperProcess struct {
	target  *loadgen.Target
	version string // the release, as tools/gatekeeper pins it
	certPEM []byte
	cmd     *exec.Cmd
	done    chan error
	log     *os.File
}

// startGatekeeper installs Gatekeeper's CRDs, template and constraint into c, runs the Gatekeeper
// binary as a local webhook process (operation webhook, its own self-signed certificate, no
// certificate rotation) with c's admin kubeconfig, and returns once it denies a review that
// breaks the template: it then serves the policy the benchmark measures.
func startGatekeeper(ctx context.Context, c *localcluster.Cluster, bins *toolbin.Binaries, maxProcs int, progress io.Writer) (_ *gatekeeperProcess, err error) {
	version, err := toolbin.PinnedVersion("gatekeeper", gatekeeperModule)
	if err != nil {
		return nil, err
	}
	if err := installCRDs(ctx, c, filepath.Join(bins.Path(toolbin.GatekeeperManifests), "gatekeeper.yaml")); err != nil {
		return nil, err
	}
	if err := c.CreateNamespace(ctx, gatekeeperNamespace); err != nil {
		return nil, err
	}
	// Gatekeeper owns its status objects by its Pod (POD_NAME): the Pod must exist, though no
	// node runs it.
	if _, stderr, err := c.Kubectl(ctx, gatekeeperPod, "apply", "-f", "-"); err != nil {
		return nil, fmt.Errorf("create Gatekeeper's Pod object: %w: %s", err, stderr)
	}
	certDir := filepath.Join(c.Dir, "gatekeeper-certs")
	certPEM, pool, err := writeCert(certDir)
	if err != nil {
		return nil, err
	}
	ports := make([]int, 4)
	for i := range ports {
		if ports[i], err = webhookreg.FreePort(); err != nil {
			return nil, err
		}
	}
	logFile, err := os.Create(filepath.Join(c.Dir, "logs", "gatekeeper.log"))
	if err != nil {
		return nil, fmt.Errorf("create Gatekeeper's log: %w", err)
	}
	cmd := exec.Command(bins.Path(toolbin.GatekeeperBinary),
		// webhook serves /v1/admit; generate creates the constraint kinds of templates, which in a
		// cluster the audit pod does.
		"--operation=webhook", "--operation=generate",
		"--port="+strconv.Itoa(ports[0]), "--host=127.0.0.1",
		"--cert-dir="+certDir, "--disable-cert-rotation",
		"--health-addr=127.0.0.1:"+strconv.Itoa(ports[1]),
		"--metrics-addr=127.0.0.1:"+strconv.Itoa(ports[2]),
		"--prometheus-port="+strconv.Itoa(ports[3]),
		"--shutdown-delay=0",
	)
	cmd.Env = append(c.Env(), "POD_NAMESPACE="+gatekeeperNamespace, "POD_NAME="+gatekeeperPodName)
	if maxProcs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(maxProcs))
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start Gatekeeper: %w", err)
	}
	g := &gatekeeperProcess{version: version, cmd: cmd, done: make(chan error, 1), log: logFile, certPEM: certPEM}
	go func() { g.done <- cmd.Wait() }()
	defer func() {
		if err != nil {
			g.stop()
			err = fmt.Errorf("%w (Gatekeeper's log: %s)", err, logFile.Name())
		}
	}()
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	g.target = &loadgen.Target{Name: Gatekeeper, URL: url, WantPatch: func(*fixture.Case) bool { return false }, PID: cmd.Process.Pid}
	fmt.Fprintf(progress, "Started Gatekeeper %s at %s (log %s)\n", version, url, logFile.Name())
	if err := webhookreg.WaitTLS(ctx, strings.TrimPrefix(url, "https://"), pool, g.done); err != nil {
		return nil, fmt.Errorf("wait for Gatekeeper's webhook: %w", err)
	}
	if _, stderr, err := c.Kubectl(ctx, budgetTemplate, "apply", "--server-side", "-f", "-"); err != nil {
		// The constraint's kind exists only once Gatekeeper has read the template; retry.
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, stderr, err = c.Kubectl(ctx, budgetTemplate, "apply", "--server-side", "-f", "-")
			return err == nil, nil
		}); err != nil {
			return nil, fmt.Errorf("apply the ConstraintTemplate and its constraint: %w: %s", err, stderr)
		}
	}
	if err := waitEnforced(ctx, url, pool); err != nil {
		return nil, err
	}
	fmt.Fprintln(progress, "Gatekeeper denies a DaemonSet over budget: the template is in force")
	return g, nil
}

// installCRDs applies the CustomResourceDefinitions of Gatekeeper's release manifest and waits
// until they are established.
func installCRDs(ctx context.Context, c *localcluster.Cluster, manifest string) error {
	raw, err := os.ReadFile(manifest)
	if err != nil {
		return fmt.Errorf("read Gatekeeper's manifest: %w", err)
	}
	crds := crdDocuments(string(raw))
	if len(crds) == 0 {
		return fmt.Errorf("no CustomResourceDefinition in %s", manifest)
	}
	if _, stderr, err := c.Kubectl(ctx, strings.Join(crds, "\n---\n"), "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("apply Gatekeeper's CRDs: %w: %s", err, stderr)
	}
	if _, stderr, err := c.Kubectl(ctx, "", "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"); err != nil {
		return fmt.Errorf("wait for Gatekeeper's CRDs: %w: %s", err, stderr)
	}
	return nil
}

// crdDocuments returns the documents of a multi-document YAML stream that are
// CustomResourceDefinitions; the release manifest also holds the Deployments, RBAC and webhook
// configurations of an in-cluster install, which the benchmark replaces by a local process.
func crdDocuments(stream string) []string {
	var out []string
	for doc := range strings.SplitSeq(stream, "\n---") {
		for line := range strings.Lines(doc) {
			if strings.TrimSpace(line) == "kind: CustomResourceDefinition" {
				out = append(out, strings.TrimPrefix(doc, "\n"))
				break
			}
		}
	}
	return out
}

// writeCert writes a fresh self-signed certificate for 127.0.0.1 as tls.crt and tls.key into dir,
// where Gatekeeper's --cert-dir reads them, and returns it as PEM and as a pool that trusts it.
func writeCert(dir string) ([]byte, *x509.CertPool, error) {
	cert, pool, err := loadgen.SelfSignedCert()
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		return nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Leaf.Raw})
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		return nil, nil, err
	}
	return certPEM, pool, nil
}

// overBudget turns the benchmark's review into one the template denies: maxUnavailable 90%,
// above the constraint's 50%.
func overBudget(review []byte) ([]byte, error) {
	const within, over = `"maxUnavailable":1`, `"maxUnavailable":"90%"`
	if n := bytes.Count(review, []byte(within)); n != 1 {
		return nil, fmt.Errorf("the review holds %s %d times, want once", within, n)
	}
	return bytes.Replace(review, []byte(within), []byte(over), 1), nil
}

// waitEnforced sends Gatekeeper a review over budget until it is denied: Gatekeeper allows
// everything until it has compiled the template and cached the constraint.
func waitEnforced(ctx context.Context, url string, pool *x509.CertPool) error {
	cases, err := reviewCases()
	if err != nil {
		return err
	}
	review, err := overBudget(cases[0].WithUID(fixture.UID(0, 1)))
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+gatekeeperPath, bytes.NewReader(review))
		if err != nil {
			return false, err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		var rr struct {
			Response *struct {
				Allowed bool `json:"allowed"`
			} `json:"response"`
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err == nil {
			err = json.Unmarshal(body, &rr)
		}
		if err != nil || rr.Response == nil {
			last = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, body)
			return false, nil
		}
		last = fmt.Sprintf("allowed: %.200s", body)
		return !rr.Response.Allowed, nil
	})
	if err != nil {
		return fmt.Errorf("wait for Gatekeeper to deny a DaemonSet over budget (last answer: %s): %w", last, err)
	}
	return nil
}

// stop ends Gatekeeper: SIGTERM, then SIGKILL after 10 s.
func (g *gatekeeperProcess) stop() {
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.done
	}
	g.log.Close()
}

var errNoCase = errors.New("the fixture has no validate-daemonset/create review")

// reviewCases are the reviews every target receives: the fixture's new DaemonSet
// (validate-daemonset/create), every object unique.
func reviewCases() ([]fixture.Case, error) {
	all, err := fixture.CasesWith(fixture.Options{UniqueObjects: true})
	if err != nil {
		return nil, err
	}
	c := fixture.Get(all, "validate-daemonset/create")
	if c == nil {
		return nil, errNoCase
	}
	return []fixture.Case{*c}, nil
}
