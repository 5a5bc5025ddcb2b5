package loadgen

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
	"github.com/daemonguard/daemonguard/webhook"
)

func TestFixturePathsAreTheWebhookPaths(t *testing.T) {
	if fixture.MutateDaemonSetPath != webhook.MutateDaemonSetPath || fixture.ValidateDaemonSetPath != webhook.ValidateDaemonSetPath ||
		fixture.MutatePodPath != webhook.MutatePodPath {
		t.Error("fixture paths differ from the webhook package's")
	}
}

// TestSmoke runs both servers, in this process and each in a process of its own, and a short
// open-loop step against each, and checks every answer: right UID, allowed, a patch exactly where
// daemonguard must patch (the null webhook never does). It asserts nothing about latency.
func TestSmoke(t *testing.T) {
	ctrl.SetLogger(logr.Discard())
	for _, processes := range []string{InProcess, OwnProcesses} {
		t.Run(processes, func(t *testing.T) {
			var (
				servers *Servers
				err     error
			)
			if processes == InProcess {
				servers, err = StartServers(t.Context(), ServerOptions{Nodes: 5}, logr.Discard())
			} else {
				servers, err = StartServerProcesses(t.Context(), ServerOptions{Nodes: 5}, "")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer servers.Close()
			smoke(t, servers)
		})
	}
}

func smoke(t *testing.T, servers *Servers) {
	for _, target := range []*Target{servers.Null, servers.Daemonguard} {
		if !strings.HasPrefix(target.URL, "https://127.0.0.1:") {
			t.Errorf("%s serves on %s, want loopback HTTPS", target.Name, target.URL)
		}
	}

	// One request by hand: daemonguard's mutating answer to the seed carries the injection.
	cases, err := fixture.Cases()
	if err != nil {
		t.Fatal(err)
	}
	create := fixture.Get(cases, "mutate-daemonset/create")
	client := newClient(servers.RootCAs, false)
	defer client.CloseIdleConnections()
	for _, target := range []*Target{servers.Daemonguard, servers.Null} {
		body, status, err := post(t.Context(), client, target.URL+create.Path, create.Review)
		if err != nil || status != 200 {
			t.Fatalf("%s: HTTP %d, %v: %s", target.Name, status, err, body)
		}
		var rr reviewResponse
		if err := json.Unmarshal(body, &rr); err != nil || rr.Response == nil || !rr.Response.Allowed {
			t.Fatalf("%s: response %s, %v", target.Name, body, err)
		}
		var ops []jsonpatch.Operation
		if len(rr.Response.Patch) > 0 {
			if err := json.Unmarshal(rr.Response.Patch, &ops); err != nil {
				t.Fatalf("%s: patch %s: %v", target.Name, rr.Response.Patch, err)
			}
		}
		switch target.Name {
		case Daemonguard:
			if !bytes.Contains(rr.Response.Patch, []byte("system-node-critical")) || !bytes.Contains(rr.Response.Patch, []byte("node-role.kubernetes.io/control-plane")) {
				t.Errorf("daemonguard patch %s lacks the priority class or the control-plane toleration", rr.Response.Patch)
			}
		case Null:
			if len(ops) != 0 {
				t.Errorf("null webhook patched: %s", rr.Response.Patch)
			}
		}
	}

	// The load itself: 200 requests/s for 1s against each, every answer checked by runStep.
	cfg := DefaultConfig()
	cfg.Rates, cfg.Duration, cfg.Warmup, cfg.Pause = []int{200}, time.Second, 0, 50*time.Millisecond
	rep, err := Run(t.Context(), cfg, servers)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want one per target", len(rep.Results))
	}
	for _, r := range rep.Results {
		if r.Sent != 200 || r.OK != 200 || r.Errors != 0 {
			t.Errorf("%s: sent %d, ok %d, errors %d: %v", r.Target, r.Sent, r.OK, r.Errors, r.ErrorSamples)
		}
		if r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.Max {
			t.Errorf("%s: percentiles out of order: %+v", r.Target, r)
		}
		// Every request allocates (its body, the response, TLS records) and takes CPU: zero
		// means the server process's counters were not read.
		if r.AllocPerRequest <= 0 || r.CPUPerRequest <= 0 || r.GCCycles < 0 {
			t.Errorf("%s: %d bytes allocated, %v CPU per request, %d GCs", r.Target, r.AllocPerRequest, r.CPUPerRequest, r.GCCycles)
		}
		// The generator's own figures exist exactly where it has a process of its own.
		if own := servers.Processes == OwnProcesses; own != (r.GeneratorAllocPerRequest > 0) {
			t.Errorf("%s (%s): generator allocated %d bytes per request", r.Target, servers.Processes, r.GeneratorAllocPerRequest)
		}
	}
	var md, js bytes.Buffer
	if err := rep.WriteMarkdown(&md, DefaultGoal); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js, DefaultGoal); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| 200 | null | 200 | 200 | 0 |") || !strings.Contains(md.String(), "| 200 | daemonguard | 200 | 200 | 0 |") {
		t.Errorf("markdown lacks the result rows:\n%s", md.String())
	}
	var parsed struct {
		Results []Result   `json:"results"`
		Ratios  []RatioRow `json:"ratios"`
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil || len(parsed.Results) != 2 || len(parsed.Ratios) != 1 {
		t.Errorf("JSON report %s: %v", js.String(), err)
	}
	t.Logf("\n%s", md.String())
}

// A server process that cannot start is an error naming the cause, not a hang; one that started
// is gone after Close.
func TestServerProcesses(t *testing.T) {
	s := &Servers{Processes: OwnProcesses, RootCAs: x509.NewCertPool()}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.startChild(t.Context(), exe, childSpec{Target: "bogus"}); err == nil || !strings.Contains(err.Error(), `unknown target \"bogus\"`) {
		t.Errorf("a child asked to serve an unknown target: %v, want an error that says so", err)
	}
	s.Close()

	servers, err := StartServerProcesses(t.Context(), ServerOptions{Nodes: 5}, "")
	if err != nil {
		t.Fatal(err)
	}
	urls := []string{servers.Null.URL, servers.Daemonguard.URL}
	if urls[0] == urls[1] {
		t.Fatalf("both servers at %s", urls[0])
	}
	servers.Close()
	for _, u := range urls {
		conn, err := net.DialTimeout("tcp", strings.TrimPrefix(u, "https://"), time.Second)
		if err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after Close", u)
		}
	}
}
