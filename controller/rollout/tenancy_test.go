package rollout

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/promquery"
	"github.com/daemonguard/daemonguard/internal/rolloutanalysis"
)

// marks is a NamespaceMarks of fixed marked namespaces.
type marks map[string]bool

func (m marks) Marked(_ context.Context, namespace string) bool { return m[namespace] }

// A gate of a DaemonSet outside the namespaces marked for node agents is measured kept to its
// namespace's series; one of a marked namespace reads what its query names.
func TestReconcileScopesTheGatesOfUnmarkedNamespaces(t *testing.T) {
	tests := map[string]struct {
		marks NamespaceMarks
		want  rolloutanalysis.Scope
	}{
		"no marks read: unmarked":          {marks: nil, want: rolloutanalysis.Scope{Label: rolloutanalysis.DefaultNamespaceLabel, Namespace: "mon"}},
		"another namespace marked":         {marks: marks{"kube-agents": true}, want: rolloutanalysis.Scope{Label: rolloutanalysis.DefaultNamespaceLabel, Namespace: "mon"}},
		"the DaemonSet's namespace marked": {marks: marks{"mon": true}, want: rolloutanalysis.Unscoped},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r, c, analyzer, _ := gatedReconciler(t, analysing(gatedSettings(t, "1", true)), errorsOf(0))
			r.Marks = tc.marks
			reconcileAgent(t, r, c)
			if len(analyzer.scopes) != 1 || analyzer.scopes[0] != tc.want {
				t.Errorf("scopes %+v, want one %+v", analyzer.scopes, tc.want)
			}
		})
	}
}

// Whatever Prometheus answers about other series, their labels never reach the DaemonSet's
// annotations, conditions or Events: only the wave's nodes and their values, or the kind of
// error.
func TestNothingPrometheusSaysOfOtherSeriesReachesTheDaemonSet(t *testing.T) {
	const secret = "db-password-5f0e"
	series := func(node, value string) string {
		return fmt.Sprintf(`{"metric":{"node":%q,"secret":%q,"namespace":"payments"},"value":[1700000000,%q]}`, node, secret, value)
	}
	tests := map[string]struct {
		status int
		body   string
		want   string // in the gate's last measurement
	}{
		"the wave's node out of bounds among other series": {
			body: `{"status":"success","data":{"resultType":"vector","result":[` + series("w00", "0.5") + "," + series(secret, "9") + `]}}`,
			want: "w00=0.5",
		},
		"a node label holding the secret, the wave's node missing": {
			body: `{"status":"success","data":{"resultType":"vector","result":[` + series(secret, "0") + `]}}`,
			want: "no sample labelled node for 1 of 1 nodes: w00",
		},
		"Prometheus' error text quoting the series": {
			status: http.StatusUnprocessableEntity,
			body:   `{"status":"error","errorType":"execution","error":"found duplicate series for the match group {secret=\"` + secret + `\"}"}`,
			want:   promquery.KindQueryFailed,
		},
		"an error page quoting the series": {
			status: http.StatusBadGateway, body: "<pre>" + secret + "</pre>",
			want: promquery.KindHTTPError,
		},
		"two samples for the secret 'node'": {
			body: `{"status":"success","data":{"resultType":"vector","result":[` + series(secret, "0") + "," + series(secret, "1") + `]}}`,
			want: promquery.KindTwoSamplesANode,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var asked []string
			prom := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_ = r.ParseForm()
				asked = append(asked, r.Form.Get("query"))
				w.Header().Set("Content-Type", "application/json")
				if tc.status != 0 {
					w.WriteHeader(tc.status)
				}
				_, _ = w.Write([]byte(tc.body))
			}))
			defer prom.Close()
			client, err := promquery.New(promquery.Options{Address: prom.URL})
			if err != nil {
				t.Fatal(err)
			}
			r, c, _, recorder := gatedReconciler(t, analysing(gatedSettings(t, "1", false)), nil)
			r.Analyzer = client
			got := reconcileAgent(t, r, c)
			if want := `errors{namespace="mon",node=~"w00"}`; len(asked) != 1 || asked[0] != want {
				t.Errorf("Prometheus was asked %q, want the query kept to namespace mon: %s", asked, want)
			}
			close(recorder.Events)
			var seen []string
			for e := range recorder.Events {
				seen = append(seen, e)
			}
			for k, v := range got.Annotations {
				seen = append(seen, k+"="+v)
			}
			for _, cond := range got.Status.Conditions {
				seen = append(seen, cond.Reason+": "+cond.Message)
			}
			all := strings.Join(seen, "\n")
			if strings.Contains(all, secret) || strings.Contains(all, "payments") {
				t.Errorf("another series' labels reached the DaemonSet:\n%s", all)
			}
			if !strings.Contains(all, tc.want) {
				t.Errorf("the DaemonSet does not say %q:\n%s", tc.want, all)
			}
		})
	}
}

// The controller's marks are the namespaces' labels: a namespace labelled for node agents is
// marked, one without the label, with another value or that cannot be read is not.
func TestNamespaceMarksReadTheNodeAgentsLabel(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "infra", Labels: map[string]string{admission.NodeAgentsLabel: "true"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "almost", Labels: map[string]string{admission.NodeAgentsLabel: "yes"}}},
	).Build()
	m := namespaceMarks{reader: c, log: logr.Discard()}
	for ns, want := range map[string]bool{"infra": true, "tenant": false, "almost": false, "absent": false} {
		if got := m.Marked(context.Background(), ns); got != want {
			t.Errorf("Marked(%s) = %v, want %v", ns, got, want)
		}
	}
}
