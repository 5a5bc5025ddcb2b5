package charts

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/test/golden"
)

func TestLint(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			args := []string{"lint", "--strict", "--kube-version", kubeVersion, "--namespace", namespace, chartDir}
			if c.values != "" {
				args = append(args, "--values", filepath.Join("testdata", "values", c.values))
			}
			// helm lint cannot be told that the cluster serves MutatingAdmissionPolicy v1 (it has
			// no --api-versions), so webhook.inProcessInjection=true would be refused as on a
			// cluster without it; auto lints the DaemonSet mutating webhook instead, and
			// TestGolden renders the policy.
			args = append(args, "--set", "webhook.inProcessInjection=auto")
			// helm lint also renders NOTES.txt, which helm template leaves out.
			out, err := runHelm(t, args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(string(out), "0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

func TestGolden(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			got := render(t, c)
			objects(t, got) // every object of a built-in kind decodes strictly
			golden.Assert(t, filepath.Join("testdata", "golden", c.golden+".yaml"), got)
		})
	}
}

func TestValuesSchemaRejects(t *testing.T) {
	cases := map[string]struct {
		args []string // helm template flags that set the value
		want string   // part of helm's schema error
	}{
		"a mistyped top-level key": {
			args: []string{"--set", "imagee.tag=v1"}, want: "additional properties 'imagee' not allowed",
		},
		"a mistyped image key": {
			args: []string{"--set", "image.repo=example.com/dg"}, want: "at '/image': additional properties 'repo' not allowed",
		},
		"a mistyped webhook key": {
			args: []string{"--set", "webhook.replica=3"}, want: "at '/webhook': additional properties 'replica' not allowed",
		},
		"a mistyped key two levels down": {
			args: []string{"--set", "webhook.podDisruptionBudget.minAvailabel=1"}, want: "at '/webhook/podDisruptionBudget': additional properties 'minAvailabel' not allowed",
		},
		"a mistyped key in a service account": {
			args: []string{"--set", "controller.serviceAccount.annotation.a=b"}, want: "at '/controller/serviceAccount': additional properties 'annotation' not allowed",
		},
		"a mistyped key in a resources block": {
			args: []string{"--set", "controller.resources.request.cpu=1"}, want: "at '/controller/resources': additional properties 'request' not allowed",
		},
		"a mistyped key in a label selector requirement": {
			args: []string{"--set-json", `webhook.namespaceSelector.matchExpressions=[{"key":"team","operater":"In","values":["a"]}]`},
			want: "additional properties 'operater' not allowed",
		},
		"a mistyped key in a toleration": {
			args: []string{"--set-json", `webhook.tolerations=[{"key":"a","effects":"NoSchedule"}]`}, want: "additional properties 'effects' not allowed",
		},
		"a mistyped security context field that would silently drop a restriction": {
			args: []string{"--set", "webhook.containerSecurityContext.readOnlyRootFileSystem=true"},
			want: "at '/webhook/containerSecurityContext': additional properties 'readOnlyRootFileSystem' not allowed",
		},
		"a mistyped affinity field": {
			args: []string{"--set", "controller.affinity.nodeAfinity.x=y"}, want: "at '/controller/affinity': additional properties 'nodeAfinity' not allowed",
		},
		"a mistyped controller key": {
			args: []string{"--set", "controller.namespace=agents"}, want: "at '/controller': additional properties 'namespace' not allowed",
		},
		"the single namespace of earlier releases, now controller.namespaces": {
			args: []string{"--set", "controller.watchNamespace=agents"}, want: "at '/controller': additional properties 'watchNamespace' not allowed",
		},
		"a controller namespace that is not a namespace name": {
			args: []string{"--set", "controller.namespaces={agents,Logging}"}, want: "at '/controller/namespaces/1': 'Logging' does not match pattern",
		},
		"a controller namespace listed twice": {
			args: []string{"--set", "controller.namespaces={agents,agents}"}, want: "at '/controller/namespaces': items at 0 and 1 are equal",
		},
		"a mistyped Prometheus key": {
			args: []string{"--set", "controller.prometheus.adress=https://prometheus:9090"}, want: "at '/controller/prometheus': additional properties 'adress' not allowed",
		},
		"a Prometheus address without a scheme": {
			args: []string{"--set", "controller.prometheus.address=prometheus:9090"}, want: "at '/controller/prometheus/address': 'prometheus:9090' does not match pattern",
		},
		"a mistyped key of the Prometheus CA ConfigMap": {
			args: []string{"--set", "controller.prometheus.caConfigMap.nmae=ca"}, want: "at '/controller/prometheus/caConfigMap': additional properties 'nmae' not allowed",
		},
		"a Prometheus timeout of 0": {
			args: []string{"--set-string", "controller.prometheus.timeout=0s"}, want: "at '/controller/prometheus/timeout'",
		},
		"a mistyped TLS key": {
			args: []string{"--set", "tls.ipAddress={127.0.0.1}"}, want: "at '/tls': additional properties 'ipAddress' not allowed",
		},
		"a mistyped cert-manager key": {
			args: []string{"--set", "certManager.enable=true"}, want: "at '/certManager': additional properties 'enable' not allowed",
		},
		"a mistyped issuerRef key": {
			args: []string{"--set", "certManager.issuerRef.nmae=corp-ca"}, want: "at '/certManager/issuerRef': additional properties 'nmae' not allowed",
		},
		"a mistyped self-managed TLS key": {
			args: []string{"--set", "selfManaged.caValidty=8760h"}, want: "at '/selfManaged': additional properties 'caValidty' not allowed",
		},
		"a mistyped ServiceMonitor key": {
			args: []string{"--set", "metrics.serviceMonitor.enable=true"}, want: "at '/metrics/serviceMonitor': additional properties 'enable' not allowed",
		},
		"a mistyped PrometheusRule key": {
			args: []string{"--set", "metrics.prometheusRule.enable=true"}, want: "at '/metrics/prometheusRule': additional properties 'enable' not allowed",
		},
		"a mistyped Grafana dashboard key": {
			args: []string{"--set", "metrics.grafanaDashboard.label.grafana_dashboard=1"}, want: "at '/metrics/grafanaDashboard': additional properties 'label' not allowed",
		},
		"a dashboard label that is not a string": {
			args: []string{"--set", "metrics.grafanaDashboard.labels.grafana_dashboard=1"}, want: "got number, want string",
		},
		"a mistyped metrics reader key": {
			args: []string{"--set", "metrics.reader.subject[0].name=prometheus"}, want: "at '/metrics/reader': additional properties 'subject' not allowed",
		},
		"a metrics reader subject of an unknown kind": {
			args: []string{"--set-json", `metrics.reader.subjects=[{"kind":"Pod","name":"prometheus"}]`}, want: "value must be one of 'User', 'Group', 'ServiceAccount'",
		},
		"a mistyped NetworkPolicy key": {
			args: []string{"--set", "networkPolicy.enable=true"}, want: "at '/networkPolicy': additional properties 'enable' not allowed",
		},
		"a metrics peer that is not a namespace or pod selector": {
			args: []string{"--set-json", `networkPolicy.metricsFrom=[{"ipBlock":{"cidr":"0.0.0.0/0"}}]`}, want: "additional properties 'ipBlock' not allowed",
		},
		"an empty metrics peer, which would admit everyone": {
			args: []string{"--set-json", `networkPolicy.metricsFrom=[{}]`}, want: "minProperties",
		},
		"a webhook peer without a CIDR": {
			args: []string{"--set-json", `networkPolicy.webhookFrom=[{"ipBlock":{}}]`}, want: "missing property 'cidr'",
		},
		"an evaluation deadline of 0": {
			args: []string{"--set", "webhook.evaluationTimeout=0s"}, want: "evaluationTimeout",
		},
		"a mistyped label selector in a metrics peer": {
			args: []string{"--set-json", `networkPolicy.metricsFrom=[{"podSelector":{"matchLabel":{"a":"b"}}}]`}, want: "additional properties 'matchLabel' not allowed",
		},
		"HTTP/2 as a string": {
			args: []string{"--set-string", "webhook.enableHTTP2=yes"}, want: "at '/webhook/enableHTTP2': got string, want boolean",
		},
		"a mistyped OpenReports key": {
			args: []string{"--set", "openReports.enable=true"}, want: "at '/openReports': additional properties 'enable' not allowed",
		},
		"a mistyped policy ConfigMap key": {
			args: []string{"--set", "policies.configMaps.team.file.a\\.rego=x"}, want: "additional properties 'file' not allowed",
		},
		"a policy file name the webhook would ignore": {
			args: []string{"--set", "policies.configMaps.team.files.paramaters\\.yaml=x"}, want: "'paramaters.yaml' does not match pattern",
		},
		"an unknown failurePolicy": {
			args: []string{"--set", "webhook.failurePolicy=Open"}, want: "at '/webhook/failurePolicy': value must be one of 'Fail', 'Ignore'",
		},
		"an unknown failureMode": {
			args: []string{"--set", "webhook.failureMode=allow"}, want: "at '/webhook/failureMode': value must be one of 'deny', 'warn'",
		},
		"an unknown image pull policy": {
			args: []string{"--set", "image.pullPolicy=Sometimes"}, want: "at '/image/pullPolicy': value must be one of",
		},
		"an unknown anti-affinity type": {
			args: []string{"--set", "webhook.podAntiAffinity.type=soft"}, want: "at '/webhook/podAntiAffinity/type': value must be one of",
		},
		"a webhook URL the API server would refuse (not https)": {
			args: []string{"--set", "webhook.url=http://127.0.0.1:9443"}, want: "at '/webhook/url'",
		},
		"an audit interval the binary cannot parse": {
			args: []string{"--set", "webhook.auditInterval=5 minutes"}, want: "at '/webhook/auditInterval'",
		},
		"a policy load timeout of zero, which the binary refuses": {
			args: []string{"--set", "webhook.policyLoadTimeout=0s"}, want: "at '/webhook/policyLoadTimeout'",
		},
		"a timeout above the API server's maximum": {
			args: []string{"--set", "webhook.timeoutSeconds=31"}, want: "at '/webhook/timeoutSeconds'",
		},
		"an issuerRef without a name": {
			args: []string{"--set", "certManager.issuerRef.kind=ClusterIssuer"}, want: "missing property 'name'",
		},
		"a string where a number belongs": {
			args: []string{"--set-string", "webhook.replicas=two"}, want: "at '/webhook/replicas': got string, want integer",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := template(t, c.args...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want a schema error", c.args)
			}
			msg := err.Error()
			if !strings.Contains(msg, "values don't meet the specifications of the schema") || !strings.Contains(msg, c.want) {
				t.Fatalf("helm template %v failed with\n%s\nwant a schema error containing %q", c.args, msg, c.want)
			}
		})
	}
}

// Prometheus files without an address, or a file given twice, would be ignored or ambiguous:
// the render fails instead, saying which values clash.
func TestPrometheusValuesThatClashFailTheRender(t *testing.T) {
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"a CA file without an address": {
			args: []string{"--set", "controller.prometheus.caFile=/ca.crt"}, want: "a CA or bearer token is set without controller.prometheus.address",
		},
		"a token Secret without an address": {
			args: []string{"--set", "controller.prometheus.bearerTokenSecret.name=token"}, want: "a CA or bearer token is set without controller.prometheus.address",
		},
		"a CA file and a CA ConfigMap": {
			args: []string{"--set", "controller.prometheus.address=https://p:9090", "--set", "controller.prometheus.caFile=/ca.crt", "--set", "controller.prometheus.caConfigMap.name=ca"},
			want: "set caFile or caConfigMap.name, not both",
		},
		"a token file and a token Secret": {
			args: []string{"--set", "controller.prometheus.address=https://p:9090", "--set", "controller.prometheus.bearerTokenFile=/t", "--set", "controller.prometheus.bearerTokenSecret.name=t"},
			want: "set bearerTokenFile or bearerTokenSecret.name, not both",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := template(t, c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("helm template %v: %v, want the render to fail saying %q", c.args, err, c.want)
			}
		})
	}
}
