package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/test/loadgen/fixture"
)

// Benchmarks of the admission path without network and TLS: the endpoints as
// internal/webhookserver registers them (controller-runtime's admission.Webhook around daemonguard's
// handlers), with every built-in policy loaded, cluster facts read as from the production cache,
// and a production-style JSON logger writing nowhere; the null webhook beside them; and the policy
// evaluations alone. Results and what they mean for users: docs/performance.md.
//
//	go test -short -run '^$' -bench . -benchmem ./webhook/
//
// (-short keeps the package's TestMain from starting a local cluster the benchmarks do not need.)

var benchSetup struct {
	once  sync.Once
	cases []fixture.Case
	set   *policy.Set
	log   logr.Logger
	err   error
}

func benchFixtures(b *testing.B) ([]fixture.Case, *policy.Set, logr.Logger) {
	b.Helper()
	s := &benchSetup
	s.once.Do(func() {
		// Like `daemonguard webhook`: a JSON zap logger at info level, here writing nowhere.
		s.log = zap.New(zap.UseDevMode(false), zap.WriteTo(io.Discard))
		logf.SetLogger(s.log)
		if s.cases, s.err = fixture.Cases(); s.err != nil {
			return
		}
		modules, params, err := policy.Builtin()
		if err != nil {
			s.err = err
			return
		}
		s.set, s.err = policy.Compile(context.Background(), modules, params)
	})
	if s.err != nil {
		b.Fatal(s.err)
	}
	return s.cases, s.set, s.log
}

// benchHandlers returns daemonguard's handlers as internal/webhookserver wires them, over a
// cluster of nodes nodes (the local cluster has 5).
func benchHandlers(b *testing.B, nodes int) (*Handlers, []fixture.Case) {
	cases, set, log := benchFixtures(b)
	return &Handlers{
		Engine:           policy.NewEngine(set),
		ExemptNamespaces: []string{"daemonguard-system", "kube-system"},
		FailureMode:      admission.FailClosed,
		// The nodes as the production cache lists them, shared by the reviews until they change.
		Lookups: admission.Lookups{NamespaceLabels: fixture.NamespaceLabeler(), Nodes: admission.NewNodeSnapshot(fixture.NodeLister(fixture.Nodes(nodes))).Nodes},
		Log:     log.WithName("admission"),
	}, cases
}

// benchServeHTTP checks the answer to c once, then measures wh.ServeHTTP on it.
func benchServeHTTP(b *testing.B, wh http.Handler, c *fixture.Case, wantPatch bool) {
	b.Helper()
	r := httptest.NewRequest(http.MethodPost, c.Path, bytes.NewReader(c.Review))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	wh.ServeHTTP(w, r)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &review); err != nil || review.Response == nil {
		b.Fatalf("%s: HTTP %d, %s (%v)", c.Name, w.Code, w.Body, err)
	}
	if resp := review.Response; !resp.Allowed || string(resp.UID) != fixture.PlaceholderUID || (len(resp.Patch) > 0) != wantPatch {
		b.Fatalf("%s: response %s, want allowed with a patch: %v", c.Name, w.Body, wantPatch)
	}
	b.SetBytes(int64(len(c.Review)))
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, c.Path, bytes.NewReader(c.Review))
		r.Header.Set("Content-Type", "application/json")
		wh.ServeHTTP(httptest.NewRecorder(), r)
	}
}

// reportCPU starts counting the process's CPU time (user and system, GC included); the returned
// function reports it per operation as cpu-ns/op. Unlike ns/op, which is wall time, it holds
// still when other processes compete for the cores, and it is what a replica's CPU request pays.
func reportCPU(b *testing.B) func() {
	start := processCPU(b)
	return func() { b.ReportMetric(float64(processCPU(b)-start)/float64(b.N), "cpu-ns/op") }
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEndpoints measures every fixture request through daemonguard's endpoint (at 5 and 500
// nodes for validations, which count the nodes a template targets) and through a null webhook
// that allows everything, served the same way: the difference is daemonguard's own work.
func BenchmarkEndpoints(b *testing.B) {
	h, cases := benchHandlers(b, 5)
	big, _ := benchHandlers(b, 500)
	null := &cradmission.Webhook{Handler: cradmission.HandlerFunc(func(context.Context, cradmission.Request) cradmission.Response { return cradmission.Allowed("") })}
	for i := range cases {
		c := &cases[i]
		b.Run("daemonguard/"+c.Name, func(b *testing.B) { benchServeHTTP(b, h.Endpoints()[c.Path], c, c.WantPatch) })
		if c.Path == ValidateDaemonSetPath {
			b.Run("daemonguard/"+c.Name+"/nodes=500", func(b *testing.B) { benchServeHTTP(b, big.Endpoints()[c.Path], c, c.WantPatch) })
		}
		b.Run("null/"+c.Name, func(b *testing.B) { benchServeHTTP(b, null, c, false) })
	}
}

// BenchmarkPolicies measures the policy evaluations alone, input built once.
func BenchmarkPolicies(b *testing.B) {
	h, cases := benchHandlers(b, 5)
	for _, name := range []string{"mutate-daemonset/create", "validate-daemonset/create"} {
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(fixture.Get(cases, name).Review, &review); err != nil {
			b.Fatal(err)
		}
		// Validate gathers the most: the namespace's labels and the nodes.
		var r admission.Outcome
		h.review(b.Context(), newGate(h.Bounds, h.Log), cradmission.Request{AdmissionRequest: *review.Request}, (*admission.Reviewer).Validate,
			func(_ cradmission.Request, o admission.Outcome) cradmission.Response {
				r = o
				return cradmission.Response{}
			})
		if r.Input == nil || r.Skip != "" || r.Err() != nil {
			b.Fatalf("%s: ended early: %+v", name, r)
		}
		set := h.Engine.Set()
		for query, evaluate := range map[string]func() error{
			"Inject":   func() error { _, err := set.Inject(b.Context(), r.Input); return err },
			"Validate": func() error { _, err := set.Validate(b.Context(), r.Input); return err },
		} {
			b.Run(query+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					if err := evaluate(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
