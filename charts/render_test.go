package charts

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/internal/toolbin"
	"github.com/daemonguard/daemonguard/webhook"
)

// Every render uses the same release, namespace and Kubernetes version so the goldens are stable.
const (
	chartDir    = "daemonguard"
	releaseName = "rel"
	namespace   = "daemonguard-system"
	kubeVersion = "1.37.2"
	// mutatingAdmissionPolicyV1 is what the discovery of an API server 1.36 or later lists and
	// `helm template` does not know by itself (it knows group versions only):
	// webhook.inProcessInjection looks for it.
	mutatingAdmissionPolicyV1 = kubesupport.MutatingAdmissionPolicyAPI + "/MutatingAdmissionPolicy"
)

// renderCase is one way to install the chart: a values file and what it must produce.
type renderCase struct {
	golden string // testdata/golden/<golden>.yaml
	values string // testdata/values/<values>, or "" for the chart's defaults
	// fullname is the prefix of every resource and the name of both webhook configurations.
	fullname string
	// selfManaged says the webhook manages its own TLS (certManager.enabled=false).
	selfManaged bool
	// controller says the rollout controller is deployed.
	controller bool
	// openReports says the webhook writes OpenReports Reports (openReports.enabled), and
	// openReportsCRD that the chart installs their CRD.
	openReports, openReportsCRD bool
	// controllerNamespaces are the namespaces the controller is limited to (controller.namespaces)
	// and must be able to roll DaemonSets out in; nil: every namespace.
	controllerNamespaces []string
	// webhooks are the settings webhook.Configurations is called with (Name, Namespace and Service
	// are filled in), plus what the chart appends from values.
	webhooks webhook.ConfigurationOptions
	extra    extraWebhookFields
	// inProcess says the chart renders the in-process injection policy (webhooks.InProcessInjection
	// must say the same).
	inProcess bool
	// preflightAccount is the ServiceAccount ("namespace/name") preflight.subjects binds to the
	// pre-flight roles; "" when it binds none.
	preflightAccount string
	// metricsReader is the ServiceAccount ("namespace/name") metrics.reader.subjects binds to the
	// metrics reader ClusterRole; "" when it binds none.
	metricsReader string
	// networkPolicy says the chart renders NetworkPolicies, metricsFrom the peers they let
	// reach the metrics ports, and webhookFrom those they let reach the webhook port (nil:
	// anyone).
	networkPolicy bool
	metricsFrom   []networkingv1.NetworkPolicyPeer
	webhookFrom   []networkingv1.NetworkPolicyPeer
	// http2 says the components are told --enable-http2=true.
	http2 bool
}

// extraWebhookFields are the selectors and matchConditions the chart appends from values to what
// webhook.Configurations returns.
type extraWebhookFields struct {
	namespaceExpressions []metav1.LabelSelectorRequirement // all three webhooks
	objectExpressions    []metav1.LabelSelectorRequirement // the two DaemonSet webhooks
	matchConditions      []admissionregistrationv1.MatchCondition
}

var renderCases = map[string]renderCase{
	"defaults: self-managed TLS, webhooks called through the in-cluster Service": {
		golden: "defaults", fullname: "rel-daemonguard", selfManaged: true, controller: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
	},
	"cert-manager with the self-signed and CA issuers the chart creates": {
		golden: "cert-manager", values: "cert-manager.yaml", fullname: "rel-daemonguard", controller: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
	},
	"cert-manager with an existing ClusterIssuer": {
		golden: "cert-manager-issuer-ref", values: "cert-manager-issuer-ref.yaml", fullname: "rel-daemonguard", controller: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
	},
	"URL mode for a webhook outside the cluster, certificate for 127.0.0.1": {
		golden: "url-mode", values: "url-mode.yaml", fullname: "rel-daemonguard", selfManaged: true, controller: true,
		webhooks: webhook.ConfigurationOptions{URL: "https://127.0.0.1:9443", FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
	},
	"policies as labelled ConfigMaps": {
		golden: "policies", values: "policies.yaml", fullname: "rel-daemonguard", selfManaged: true, controller: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
	},
	"OpenReports Reports from the audit, with their CRD": {
		golden: "openreports", values: "openreports.yaml", fullname: "rel-daemonguard", selfManaged: true, controller: true,
		openReports: true, openReportsCRD: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
	},
	"admission only, the rollout controller disabled": {
		golden: "controller-disabled", values: "controller-disabled.yaml", fullname: "rel-daemonguard", selfManaged: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
	},
	"auto in-process injection left to the webhook: a policy ConfigMap changes the inject parameters": {
		golden: "inprocess-auto-off", values: "inprocess-auto-off.yaml", fullname: "rel-daemonguard", selfManaged: true, controller: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5},
	},
	"NetworkPolicies that let no one reach the metrics ports": {
		golden: "network-policy", values: "network-policy.yaml", fullname: "rel-daemonguard", selfManaged: true, controller: true,
		webhooks: webhook.ConfigurationOptions{FailurePolicy: admissionregistrationv1.Fail, TimeoutSeconds: 5, InProcessInjection: true}, inProcess: true,
		networkPolicy: true,
	},
	"every knob away from its default": {
		golden: "everything", values: "everything.yaml", fullname: "guard", selfManaged: true, controller: true, controllerNamespaces: []string{"agents", "logging"},
		preflightAccount: "ci/plan", metricsReader: "monitoring/prometheus-k8s", http2: true, networkPolicy: true,
		webhookFrom: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24"}}},
		metricsFrom: []networkingv1.NetworkPolicyPeer{
			{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
			},
			{PodSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app.kubernetes.io/name", Operator: metav1.LabelSelectorOpIn, Values: []string{"metrics-agent"}},
			}}},
		},
		webhooks: webhook.ConfigurationOptions{
			ExemptNamespaces: []string{"monitoring", "cert-manager"},
			FailurePolicy:    admissionregistrationv1.Ignore, TimeoutSeconds: 10, InProcessInjection: true,
		},
		inProcess: true,
		extra: extraWebhookFields{
			namespaceExpressions: []metav1.LabelSelectorRequirement{{Key: "daemonguard.io/enabled", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"false"}}},
			objectExpressions:    []metav1.LabelSelectorRequirement{{Key: "app.kubernetes.io/managed-by", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"legacy-tool"}}},
			matchConditions:      []admissionregistrationv1.MatchCondition{{Name: "not-ci-bot", Expression: `!('ci-bots' in request.userInfo.groups)`}},
		},
	},
}

// helmBinary builds helm from tools/helm once per test binary (cached across runs).
var helmBinary = sync.OnceValues(func() (string, error) {
	bins, err := toolbin.Ensure(context.Background(), io.Discard, "helm")
	if err != nil {
		return "", err
	}
	return bins.Path("helm"), nil
})

// readInputs reads every file helm reads, in this process: go test caches results by the files a
// test opens, and would otherwise not see a changed template that only the helm process read.
var readInputs = sync.OnceValue(func() error {
	for _, dir := range []string{chartDir, filepath.Join("testdata", "values")} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			_, err = os.ReadFile(path)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
})

// runHelm runs helm with its config, cache and data homes in a temporary folder, so no user
// repositories or plugins take part. A failure returns helm's stderr as the error.
func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return runHelmIn(t, "", args...)
}

// runHelmIn is runHelm in the working directory dir ("" for the test's own).
func runHelmIn(t *testing.T, dir string, args ...string) ([]byte, error) {
	t.Helper()
	if err := readInputs(); err != nil {
		t.Fatal(err)
	}
	bin, err := helmBinary()
	if err != nil {
		t.Fatalf("build helm: %v", err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("helm %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// template runs helm template with the fixed release, namespace and Kubernetes version.
func template(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return runHelm(t, append([]string{"template", "--namespace", namespace, releaseName, chartDir, "--kube-version", kubeVersion, "--api-versions", mutatingAdmissionPolicyV1}, args...)...)
}

var (
	rendersMu sync.Mutex
	renders   = map[string][]byte{}
)

// render returns the manifests of a case, rendered once per test binary.
func render(t *testing.T, c renderCase) []byte {
	t.Helper()
	rendersMu.Lock()
	defer rendersMu.Unlock()
	if out, ok := renders[c.golden]; ok {
		return out
	}
	var args []string
	if c.values != "" {
		args = []string{"--values", filepath.Join("testdata", "values", c.values)}
	}
	out, err := template(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	renders[c.golden] = out
	return out
}

// object is one rendered manifest: its YAML and, for kinds client-go knows, the typed object.
type object struct {
	Kind, Name, Namespace string
	YAML                  []byte
	Typed                 runtime.Object // nil for CRD kinds (cert-manager, Prometheus Operator)
}

// strictDecoder fails on fields the API types do not have, so a mistyped field in a template
// fails the tests instead of being dropped by the API server.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// objects splits and decodes rendered manifests.
func objects(t *testing.T, rendered []byte) []object {
	t.Helper()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(rendered)))
	var out []object
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("split manifests: %v", err)
		}
		var meta metav1.PartialObjectMetadata
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("decode manifest: %v\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue // only comments
		}
		o := object{Kind: meta.Kind, Name: meta.Name, Namespace: meta.Namespace, YAML: doc}
		typed, _, err := strictDecoder.Decode(doc, nil, nil)
		switch {
		case runtime.IsNotRegisteredError(err):
		case err != nil:
			t.Errorf("%s %s does not decode strictly: %v", meta.Kind, meta.Name, err)
		default:
			o.Typed = typed
		}
		out = append(out, o)
	}
}

// ofKind returns the rendered objects of a kind, typed or not (CRD kinds).
func ofKind(objs []object, kind string) []object {
	var out []object
	for _, o := range objs {
		if o.Kind == kind {
			out = append(out, o)
		}
	}
	return out
}

// typedObjects returns the rendered objects of type T.
func typedObjects[T runtime.Object](objs []object) []T {
	var out []T
	for _, o := range objs {
		if typed, ok := o.Typed.(T); ok {
			out = append(out, typed)
		}
	}
	return out
}

// only returns the single rendered object of type T.
func only[T runtime.Object](t *testing.T, objs []object) T {
	t.Helper()
	found := typedObjects[T](objs)
	if len(found) != 1 {
		var zero T
		t.Fatalf("rendered %d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}
