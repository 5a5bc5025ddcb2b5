package loadgen

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
	"github.com/daemonguard/daemonguard/test/webhookreg"
	"github.com/daemonguard/daemonguard/webhook"
)

// Target names.
const (
	Null        = "null"
	Daemonguard = "daemonguard"
)

// Target is a running webhook server.
type Target struct {
	Name string
	URL  string // https://127.0.0.1:PORT
	// WantPatch says whether the target's answer to a case carries a patch (both always allow).
	WantPatch func(*fixture.Case) bool
	// PID is the server's process when it runs in one of its own (StartServerProcesses), else 0:
	// what test/peerbench reads CPU time and RSS of.
	PID  int
	done chan error
	kill func() // own processes: kills the server's process
}

// Servers are the two webhook servers under test, on loopback: in this process (StartServers) or
// each in a process of its own (StartServerProcesses).
type Servers struct {
	Null, Daemonguard *Target
	// Options are daemonguard's server options, for the report.
	Options ServerOptions
	// Processes says where the servers run: InProcess or OwnProcesses.
	Processes string
	// RootCAs trusts the servers' self-signed certificates.
	RootCAs *x509.CertPool
	cancel  context.CancelFunc // in process: stops both servers
	stdins  []io.Closer        // own processes: closing one stops its server
}

// Where the servers run (Servers.Processes).
const (
	// InProcess: both servers and the generator share one process, its CPUs and its heap.
	InProcess = "in-process"
	// OwnProcesses: each server runs in a child process of its own, as a webhook runs in its own
	// pod; the generator, like the API server, is another process.
	OwnProcesses = "own-processes"
)

// Close stops both servers and waits for them; a server process that has not exited 10s after
// being told to is killed.
func (s *Servers) Close() {
	if s.cancel != nil {
		s.cancel()
	}
	for _, c := range s.stdins {
		c.Close()
	}
	for _, t := range []*Target{s.Null, s.Daemonguard} {
		if t == nil {
			continue
		}
		select {
		case <-t.done:
		case <-time.After(10 * time.Second):
			if t.kill != nil {
				t.kill()
			}
			<-t.done
		}
	}
}

// ServerOptions configure daemonguard's server under test.
type ServerOptions struct {
	Nodes int // size of the cluster the cluster facts describe
	// MaxProcs, when positive, is the GOMAXPROCS of each server process (OwnProcesses only):
	// 1 measures what a webhook replica serves with one core.
	MaxProcs int
	// ProfileLabels runs every request's handler under the pprof label target=null or
	// target=daemonguard, so a CPU profile of a run splits by server (go tool pprof -tagfocus).
	// It costs both servers the same small amount.
	ProfileLabels bool
	// HTTP2 makes both servers offer HTTP/2, as daemonguard's webhook does with --enable-http2;
	// without it they speak HTTP/1.1 only, daemonguard's default.
	HTTP2 bool
}

// DaemonguardHandlers returns daemonguard's handlers wired as internal/webhookserver wires them: every built-in
// policy, daemonguard's own namespace and kube-system exempt, fail closed, and cluster facts of a
// cluster of opts.Nodes nodes read the way the production cache reads them (see fixture.NodeLister),
// through the snapshot the reviews share (admission.NodeSnapshot).
func DaemonguardHandlers(ctx context.Context, opts ServerOptions, log logr.Logger) (*webhook.Handlers, error) {
	modules, params, err := policy.Builtin()
	if err != nil {
		return nil, err
	}
	set, err := policy.Compile(ctx, modules, params)
	if err != nil {
		return nil, fmt.Errorf("compile built-in policies: %w", err)
	}
	return &webhook.Handlers{
		Engine:           policy.NewEngine(set),
		ExemptNamespaces: []string{"daemonguard-system", "kube-system"},
		FailureMode:      admission.FailClosed,
		Lookups: admission.Lookups{
			NamespaceLabels: fixture.NamespaceLabeler(), Nodes: admission.NewNodeSnapshot(fixture.NodeLister(fixture.Nodes(opts.Nodes))).Nodes,
		},
		Log: log.WithName("admission"),
	}, nil
}

// NullHandler allows everything; it reads nothing beyond what its server decoded.
var NullHandler = cradmission.HandlerFunc(func(context.Context, cradmission.Request) cradmission.Response {
	return cradmission.Allowed("")
})

// StartServers starts, in this process on 127.0.0.1, a controller-runtime webhook server serving
// daemonguard's three webhooks exactly as internal/webhookserver registers them (handlers from
// DaemonguardHandlers), and one serving the null webhook on the same three paths: same
// certificate, TLS settings, HTTP server and metrics instrumentation; the null webhook decodes
// reviews as daemonguard's do (controller-runtime's admission.Webhook). They run until Close.
func StartServers(ctx context.Context, opts ServerOptions, log logr.Logger) (*Servers, error) {
	cert, pool, err := SelfSignedCert()
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s := &Servers{Options: opts, Processes: InProcess, RootCAs: pool, cancel: cancel}
	for _, name := range []string{Null, Daemonguard} {
		hooks, err := targetHooks(ctx, name, opts, log)
		if err == nil {
			var t *Target
			t, err = startServer(ctx, runCtx, name, cert, pool, opts, hooks)
			s.set(t)
		}
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Servers) set(t *Target) {
	switch {
	case t == nil:
	case t.Name == Null:
		s.Null = t
	default:
		s.Daemonguard = t
	}
}

// targetHooks returns the handlers of the named target by path: daemonguard's as
// internal/webhookserver registers them (Handlers.Endpoints), or the null webhook on the same paths.
func targetHooks(ctx context.Context, name string, opts ServerOptions, log logr.Logger) (map[string]http.Handler, error) {
	switch name {
	case Null:
		null := &cradmission.Webhook{Handler: NullHandler}
		return map[string]http.Handler{webhook.MutateDaemonSetPath: null, webhook.ValidateDaemonSetPath: null, webhook.MutatePodPath: null}, nil
	case Daemonguard:
		handlers, err := DaemonguardHandlers(ctx, opts, log)
		if err != nil {
			return nil, err
		}
		return handlers.Endpoints(), nil
	}
	return nil, fmt.Errorf("unknown target %q (want %q or %q)", name, Null, Daemonguard)
}

// wantPatch says whether the named target's answer to a case carries a patch: daemonguard's
// where the case expects one, the null webhook's never.
func wantPatch(name string) func(*fixture.Case) bool {
	if name == Daemonguard {
		return func(c *fixture.Case) bool { return c.WantPatch }
	}
	return func(*fixture.Case) bool { return false }
}

// startServer runs a controller-runtime webhook server with daemonguard's serving settings (what
// internal/webhookserver uses: internal/serving) on a free loopback port and waits until it
// completes TLS handshakes.
func startServer(ctx, runCtx context.Context, name string, cert tls.Certificate, pool *x509.CertPool, opts ServerOptions, hooks map[string]http.Handler) (*Target, error) {
	var lastErr error
	for range 5 { // the free port can be taken between probing and listening; try another
		port, err := webhookreg.FreePort()
		if err != nil {
			return nil, err
		}
		srv := serving.Options{EnableHTTP2: opts.HTTP2}.WebhookServer(crwebhook.Options{
			Host: "127.0.0.1", Port: port,
			TLSOpts: []func(*tls.Config){func(c *tls.Config) {
				c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil }
			}},
		})
		for path, h := range hooks {
			if opts.ProfileLabels {
				h = labelled(name, h)
			}
			srv.Register(path, h)
		}
		srv.Register(StatsPath, statsHandler{})
		t := &Target{Name: name, URL: "https://127.0.0.1:" + strconv.Itoa(port), WantPatch: wantPatch(name), done: make(chan error, 1)}
		go func() { t.done <- srv.Start(runCtx) }()
		if lastErr = webhookreg.WaitTLS(ctx, t.URL[len("https://"):], pool, t.done); lastErr == nil {
			return t, nil
		}
	}
	return nil, fmt.Errorf("start %s webhook server: %w", name, lastErr)
}

// labelled runs h under the pprof label target=name.
func labelled(name string, h http.Handler) http.Handler {
	labels := pprof.Labels("target", name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pprof.Do(r.Context(), labels, func(ctx context.Context) { h.ServeHTTP(w, r.WithContext(ctx)) })
	})
}

// SelfSignedCert returns a fresh ECDSA P-256 certificate for 127.0.0.1, valid for a day, and a
// pool that trusts it.
func SelfSignedCert() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "daemonguard-loadgen"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}
