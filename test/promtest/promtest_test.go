package promtest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A real Prometheus scrapes an in-test exporter, serves its series back, and has it again after
// a stop and a start on the same TSDB.
func TestScrapesAndSurvivesARestart(t *testing.T) {
	reg := prometheus.NewRegistry()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "promtest_value", Help: "A value."}, []string{"node"})
	reg.MustRegister(g)
	g.WithLabelValues("w1").Set(7)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	p := Start(t, Config{Targets: []string{srv.Listener.Addr().String()}})
	vec := p.WaitForSamples(t, `promtest_value{node="w1"} == 7`, 1)
	if vec[0].Metric["job"] != "agents" {
		t.Errorf("sample %v, want job agents", vec[0])
	}
	p.Stop(t)
	if _, err := http.Get(p.URL() + "/-/ready"); err == nil {
		t.Fatal("prometheus still answers after Stop")
	}
	g.WithLabelValues("w1").Set(8)
	p.Start(t)
	p.WaitForSamples(t, `promtest_value{node="w1"} == 8`, 1)
}
