package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/loadgen/fixture"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// Benchmarks of the admission path. The ServeHTTP benchmarks measure what the API server pays per
// call minus the network and TLS: the handler chain as internal/webhookserver registers it
// (Serve, which reads, checks and decodes the AdmissionReview, runs the handler under
// controller-runtime's admission.Webhook.Handle and encodes the response), with every built-in policy loaded,
// cluster facts read the way the production cache reads them, and a production-style JSON logger
// (writing to io.Discard). They repeat one request, so the decision cache is off except in the
// .../cached benchmarks, which measure its hit path. The other benchmarks isolate one function of
// that path.
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
		// The benchmarks repeat one request: measure the evaluation, not the cache and the memo.
		NoDecisionCache:  true,
		NoNodeFactsMemo:  true,
		Engine:           policy.NewEngine(set),
		ExemptNamespaces: []string{"daemonguard-system", "kube-system"},
		FailureMode:      FailClosed,
		Facts: Facts{
			NamespaceLabels: fixture.NamespaceLabeler(), Nodes: fixture.NodeLister(fixture.Nodes(nodes)),
			NodesGeneration: NewNodeGeneration(nil).Get, // as production: the nodes do not change
		},
		Log: log.WithName("admission"),
	}, cases
}

// cached returns a copy of h with the decision cache on (and empty): its ServeHTTP benchmarks
// measure a request identical to one answered before, the cache's hit path.
func cached(h *Handlers) *Handlers {
	return &Handlers{Engine: h.Engine, ExemptNamespaces: h.ExemptNamespaces, FailureMode: h.FailureMode, Facts: h.Facts, Log: h.Log}
}

// serveOnce posts one review to wh and returns the decoded response.
func serveOnce(wh http.Handler, c *fixture.Case) (*httptest.ResponseRecorder, *admissionv1.AdmissionResponse, error) {
	r := httptest.NewRequest(http.MethodPost, c.Path, bytes.NewReader(c.Review))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	wh.ServeHTTP(w, r)
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(w.Body.Bytes(), &review); err != nil {
		return w, nil, err
	}
	return w, review.Response, nil
}

// daemonguardHTTP wraps a handler as internal/webhookserver registers it.
func daemonguardHTTP(h admission.Handler) http.Handler {
	return Serve(h)
}

// benchServeHTTP checks the answer to c once, then measures wh.ServeHTTP on it.
func benchServeHTTP(b *testing.B, wh http.Handler, c *fixture.Case, wantPatch bool) {
	b.Helper()
	w, resp, err := serveOnce(wh, c)
	switch {
	case err != nil:
		b.Fatalf("%s: %v", c.Name, err)
	case w.Code != http.StatusOK || resp == nil || !resp.Allowed || string(resp.UID) != fixture.PlaceholderUID:
		b.Fatalf("%s: HTTP %d, response %s", c.Name, w.Code, w.Body)
	case (len(resp.Patch) > 0) != wantPatch:
		b.Fatalf("%s: patch %s, want a patch: %v", c.Name, resp.Patch, wantPatch)
	}
	b.SetBytes(int64(len(c.Review)))
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, c.Path, bytes.NewReader(c.Review))
		r.Header.Set("Content-Type", "application/json")
		wh.ServeHTTP(httptest.NewRecorder(), r)
	}
}

// decodeRequest decodes a case the way admission.Webhook does, for the handler-level benchmarks.
func decodeRequest(b *testing.B, c *fixture.Case) admission.Request {
	b.Helper()
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(c.Review, &review); err != nil {
		b.Fatal(err)
	}
	return admission.Request{AdmissionRequest: *review.Request}
}

func BenchmarkMutateDaemonSet(b *testing.B) {
	h, cases := benchHandlers(b, 5)
	create, update := fixture.Get(cases, "mutate-daemonset/create"), fixture.Get(cases, "mutate-daemonset/update")
	b.Run("ServeHTTP/create", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetMutator{h}), create, true) })
	b.Run("ServeHTTP/update", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetMutator{h}), update, false) })
	b.Run("ServeHTTP/create/cached", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetMutator{cached(h)}), create, true) })
	b.Run("ServeHTTP/update/cached", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetMutator{cached(h)}), update, false) })
	b.Run("Handle/create", func(b *testing.B) {
		req := decodeRequest(b, create)
		m := DaemonSetMutator{h}
		b.ReportAllocs()
		for b.Loop() {
			m.Handle(b.Context(), req)
		}
	})
	b.Run("Inject", func(b *testing.B) { // the inject policy alone, input built once
		req := decodeRequest(b, create)
		in, early := h.daemonSetInput(req, h.gather(b.Context(), req, false))
		if early != nil {
			b.Fatalf("early response %+v", early)
		}
		set := h.Engine.Set()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := set.Inject(b.Context(), in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("DaemonSetPatch", func(b *testing.B) { // the patch computation alone
		req := decodeRequest(b, create)
		in, _ := h.daemonSetInput(req, h.gather(b.Context(), req, false))
		decision, err := h.Engine.Set().Inject(b.Context(), in)
		if err != nil || !decision.Inject {
			b.Fatalf("decision %+v, %v", decision, err)
		}
		raw := req.Object.Raw
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if patch, err := DaemonSetPatch(raw, decision); err != nil || len(patch) == 0 {
				b.Fatalf("patch %v, %v", patch, err)
			}
		}
	})
	b.Run("input", func(b *testing.B) { // decoding the object and reading cluster facts
		req := decodeRequest(b, create)
		b.ReportAllocs()
		for b.Loop() {
			if _, early := validationInput(b.Context(), h, req); early != nil {
				b.Fatal(early)
			}
		}
	})
}

func BenchmarkValidateDaemonSet(b *testing.B) {
	h, cases := benchHandlers(b, 5)
	create, update := fixture.Get(cases, "validate-daemonset/create"), fixture.Get(cases, "validate-daemonset/update")
	b.Run("ServeHTTP/create", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetValidator{h}), create, false) })
	b.Run("ServeHTTP/update", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetValidator{h}), update, false) })
	b.Run("ServeHTTP/create/cached", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetValidator{cached(h)}), create, false) })
	b.Run("ServeHTTP/update/cached", func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(DaemonSetValidator{cached(h)}), update, false) })
	b.Run("ServeHTTP/create/nodes=500", func(b *testing.B) {
		big, _ := benchHandlers(b, 500)
		benchServeHTTP(b, daemonguardHTTP(DaemonSetValidator{big}), create, false)
	})
	b.Run("ServeHTTP/create/nodes=500/facts-remembered", func(b *testing.B) { // a new object, a known template
		big, _ := benchHandlers(b, 500)
		big.NoNodeFactsMemo = false
		benchServeHTTP(b, daemonguardHTTP(DaemonSetValidator{big}), create, false)
	})
	b.Run("ServeHTTP/create/nodes=500/cached", func(b *testing.B) { // keyed by node generation: no list
		big, _ := benchHandlers(b, 500)
		benchServeHTTP(b, daemonguardHTTP(DaemonSetValidator{cached(big)}), create, false)
	})
	b.Run("Validate", func(b *testing.B) { // the validation policies alone, input built once
		req := decodeRequest(b, create)
		in, early := validationInput(b.Context(), h, req)
		if early != nil {
			b.Fatalf("early response %+v", early)
		}
		set := h.Engine.Set()
		if v, err := set.Validate(b.Context(), in); err != nil || len(v) != 0 {
			b.Fatalf("violations %v, %v", v, err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := set.Validate(b.Context(), in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkMutatePod(b *testing.B) {
	h, cases := benchHandlers(b, 5)
	for _, variant := range []string{"pinned", "nodename"} {
		c := fixture.Get(cases, "mutate-pod/"+variant)
		b.Run("ServeHTTP/"+variant, func(b *testing.B) { benchServeHTTP(b, daemonguardHTTP(PodPinner{h}), c, c.WantPatch) })
		b.Run("PodPinPatch/"+variant, func(b *testing.B) {
			raw := decodeRequest(b, c).Object.Raw
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				if res, err := PodPinPatch(raw); err != nil || (len(res.Patch) > 0) != c.WantPatch {
					b.Fatalf("%+v, %v", res, err)
				}
			}
		})
	}
}

// BenchmarkNullWebhook is the baseline: a handler that allows everything, served by
// controller-runtime's admission.Webhook as Go webhooks commonly are (ServeHTTP/...), and by Serve
// (Serve/...). Serve parses a review once where admission.Webhook parses it twice, so daemonguard's
// ServeHTTP benchmarks minus the Serve/... ones are daemonguard's own work.
func BenchmarkNullWebhook(b *testing.B) {
	_, cases := benchHandlers(b, 5)
	allow := admission.HandlerFunc(func(context.Context, admission.Request) admission.Response { return admission.Allowed("") })
	for name, null := range map[string]http.Handler{"ServeHTTP": &admission.Webhook{Handler: allow}, "Serve": Serve(allow)} {
		for i := range cases {
			c := &cases[i]
			b.Run(name+"/"+c.Name, func(b *testing.B) { benchServeHTTP(b, null, c, false) })
		}
	}
}

// validationInput builds the policy input as a validation that misses the cache does: the object
// decoded, the namespace labels, and the node facts of its template.
func validationInput(ctx context.Context, h *Handlers, req admission.Request) (*policy.Input, *admission.Response) {
	f := h.gather(ctx, req, true)
	in, early := h.daemonSetInput(req, f)
	if early == nil {
		in.Cluster = h.templateFacts(ctx, req.Object.Raw, in.Object, &f)
	}
	return in, early
}
