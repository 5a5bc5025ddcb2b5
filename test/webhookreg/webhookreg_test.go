package webhookreg

import (
	"slices"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/webhook"
)

func TestParseCallsCountsAnsweredCallsByWebhook(t *testing.T) {
	metrics := `# HELP apiserver_admission_webhook_request_total [ALPHA] Admission webhook request total.
# TYPE apiserver_admission_webhook_request_total counter
apiserver_admission_webhook_request_total{code="200",name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="false",type="admit"} 3
apiserver_admission_webhook_request_total{code="200",name="daemonsets.mutate.daemonguard.io",operation="UPDATE",rejected="false",type="admit"} 2
apiserver_admission_webhook_request_total{code="0",name="daemonsets.mutate.daemonguard.io",operation="CREATE",rejected="true",type="admit"} 4
apiserver_admission_webhook_request_total{code="200",name="daemonsets.validate.daemonguard.io",operation="CREATE",rejected="true",type="validating"} 1
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 9
`
	got, err := parseCalls(strings.NewReader(metrics))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]calls{
		"daemonsets.mutate.daemonguard.io":   {total: 9, answered: 5},
		"daemonsets.validate.daemonguard.io": {total: 1, answered: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("parseCalls = %v, want %v", got, want)
	}
	for name, c := range want {
		if got[name] != c {
			t.Errorf("%s: %+v, want %+v", name, got[name], c)
		}
	}
}

func TestParseCallsWithoutWebhookCalls(t *testing.T) {
	got, err := parseCalls(strings.NewReader("# TYPE apiserver_request_total counter\napiserver_request_total 1\n"))
	if err != nil || len(got) != 0 {
		t.Fatalf("parseCalls = %v, %v; want no calls, no error", got, err)
	}
	if _, err := parseCalls(strings.NewReader("not { metrics")); err == nil {
		t.Fatal("parseCalls accepted malformed metrics")
	}
}

func TestDaemonSetWebhooksLeaveOutThePodWebhook(t *testing.T) {
	for name, tc := range map[string]struct {
		opts webhook.ConfigurationOptions
		want []string
	}{
		"webhook injection": {
			opts: webhook.ConfigurationOptions{Name: "x", URL: "https://127.0.0.1:1", Namespace: "ns"},
			want: []string{"daemonsets.mutate.daemonguard.io", "daemonsets.validate.daemonguard.io"},
		},
		"in-process injection: no DaemonSet mutating webhook": {
			opts: webhook.ConfigurationOptions{Name: "x", URL: "https://127.0.0.1:1", Namespace: "ns", InProcessInjection: true},
			want: []string{"daemonsets.validate.daemonguard.io"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := daemonSetWebhooks(tc.opts); !slices.Equal(got, tc.want) {
				t.Errorf("daemonSetWebhooks = %v, want %v", got, tc.want)
			}
		})
	}
}
