package charts

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/selftls"
	"github.com/daemonguard/daemonguard/test/harness"
)

// allowsURL evaluates RBAC for a non-resource URL as the API server's authorizer does: only
// ClusterRoles bound by ClusterRoleBindings grant them.
func (r rbac) allowsURL(saNamespace, saName, verb, path string) bool {
	for _, b := range r.clusterRoleBindings {
		bound := slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Namespace == saNamespace && s.Name == saName
		})
		if bound && b.RoleRef.Kind == "ClusterRole" && slices.ContainsFunc(r.clusterRoles[b.RoleRef.Name], func(rule rbacv1.PolicyRule) bool {
			return slices.Contains(rule.NonResourceURLs, path) && slices.Contains(rule.Verbs, verb)
		}) {
			return true
		}
	}
	return false
}

// TestMetricsReaderRole checks the ClusterRole <fullname>-metrics-reader: get on exactly the
// paths the metrics servers serve behind authorization (harness.MetricsPaths, from the code),
// bound to metrics.reader.subjects when set. No other role grants a non-resource URL.
func TestMetricsReaderRole(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			r := renderedRBAC(objects(t, render(t, c)))
			roleName := c.fullname + "-metrics-reader"
			want := []rbacv1.PolicyRule{{NonResourceURLs: slices.Sorted(slices.Values(harness.MetricsPaths)), Verbs: []string{"get"}}}
			got, ok := r.clusterRoles[roleName]
			if !ok {
				t.Fatalf("no ClusterRole %s", roleName)
			}
			for i := range got {
				got[i].NonResourceURLs = slices.Sorted(slices.Values(got[i].NonResourceURLs))
			}
			if !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("ClusterRole %s rules %+v, want %+v", roleName, got, want)
			}
			for other, rules := range r.clusterRoles {
				for _, rule := range rules {
					if other != roleName && len(rule.NonResourceURLs) > 0 {
						t.Errorf("ClusterRole %s grants non-resource URLs: %+v", other, rule)
					}
				}
			}
			if c.metricsReader == "" {
				for _, b := range r.clusterRoleBindings {
					if b.RoleRef.Name == roleName {
						t.Errorf("metrics.reader.subjects is empty, but %s binds the metrics reader role", b.Name)
					}
				}
				return
			}
			ns, sa, _ := strings.Cut(c.metricsReader, "/")
			for _, path := range harness.MetricsPaths {
				if !r.allowsURL(ns, sa, "get", path) {
					t.Errorf("%s may not get %s", c.metricsReader, path)
				}
			}
			for _, q := range []request{{"list", "", "pods", "", ""}, {"get", "", "secrets", namespace, c.fullname + "-webhook-tls"}} {
				if r.allows(ns, sa, q) {
					t.Errorf("%s may %s", c.metricsReader, q)
				}
			}
		})
	}
}

// serviceMonitor is the part of a monitoring.coreos.com/v1 ServiceMonitor the chart sets.
type serviceMonitor struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port            string `json:"port"`
			Path            string `json:"path"`
			Scheme          string `json:"scheme"`
			BearerTokenFile string `json:"bearerTokenFile"`
			TLSConfig       struct {
				ServerName         string `json:"serverName"`
				InsecureSkipVerify bool   `json:"insecureSkipVerify"`
				CA                 struct {
					Secret    *corev1.SecretKeySelector    `json:"secret"`
					ConfigMap *corev1.ConfigMapKeySelector `json:"configMap"`
				} `json:"ca"`
			} `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// TestServiceMonitorsScrapeHTTPS: with metrics.serviceMonitor.enabled, each component's
// ServiceMonitor scrapes a port of its metrics Service over HTTPS with Prometheus's token. The
// webhook's is verified with ca.crt of the Secret whose certificate the webhook serves (mounted or
// self-managed at --cert-dir), under a name that certificate covers; the controller's, which
// serves a self-signed certificate, is not.
func TestServiceMonitorsScrapeHTTPS(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, render(t, c))
			var monitors []serviceMonitor
			for _, o := range ofKind(objs, "ServiceMonitor") {
				var sm serviceMonitor
				if err := yaml.Unmarshal(o.YAML, &sm); err != nil {
					t.Fatal(err)
				}
				monitors = append(monitors, sm)
			}
			if c.golden != "everything" {
				if len(monitors) != 0 {
					t.Fatalf("%d ServiceMonitors with metrics.serviceMonitor.enabled=false", len(monitors))
				}
				return
			}
			if len(monitors) != 2 {
				t.Fatalf("%d ServiceMonitors, want one per component", len(monitors))
			}
			services := typedObjects[*corev1.Service](objs)
			for _, sm := range monitors {
				component := sm.Metadata.Labels["app.kubernetes.io/component"]
				selector, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
				if err != nil {
					t.Fatal(err)
				}
				var svc *corev1.Service
				for _, s := range services {
					if selector.Matches(labels.Set(s.Labels)) {
						if svc != nil {
							t.Fatalf("ServiceMonitor %s selects Services %s and %s", sm.Metadata.Name, svc.Name, s.Name)
						}
						svc = s
					}
				}
				if svc == nil || len(sm.Spec.Endpoints) != 1 {
					t.Fatalf("ServiceMonitor %s selects Service %v with %d endpoints, want one Service and one endpoint", sm.Metadata.Name, svc, len(sm.Spec.Endpoints))
				}
				ep := sm.Spec.Endpoints[0]
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					t.Errorf("ServiceMonitor %s scrapes port %q, which Service %s lacks", sm.Metadata.Name, ep.Port, svc.Name)
				}
				if ep.Scheme != "https" || ep.Path != "/metrics" || ep.BearerTokenFile != "/var/run/secrets/kubernetes.io/serviceaccount/token" {
					t.Errorf("ServiceMonitor %s scrapes %s %s with token file %q, want https /metrics with Prometheus's ServiceAccount token", sm.Metadata.Name, ep.Scheme, ep.Path, ep.BearerTokenFile)
				}
				tlsConfig := ep.TLSConfig
				switch component {
				case "webhook":
					if tlsConfig.InsecureSkipVerify {
						t.Errorf("the webhook's ServiceMonitor TLS %+v, want it verified", tlsConfig)
					}
					checkCAHoldsNoKey(t, objs, c, tlsConfig.CA.Secret, tlsConfig.CA.ConfigMap)
					if names := certificateNames(t, objs, c); !slices.Contains(names, tlsConfig.ServerName) {
						t.Errorf("the webhook's ServiceMonitor verifies the name %q, which its certificate (%v) does not cover", tlsConfig.ServerName, names)
					}
				case "controller":
					if !tlsConfig.InsecureSkipVerify || tlsConfig.CA.Secret != nil {
						t.Errorf("the controller's ServiceMonitor TLS %+v, want its self-signed certificate not verified", tlsConfig)
					}
				default:
					t.Errorf("ServiceMonitor %s of component %q", sm.Metadata.Name, component)
				}
			}
		})
	}
}

// certificateNames returns the DNS names of the webhook's serving certificate: the cert-manager
// Certificate's, or in self-managed TLS mode the --tls-dns-name arguments of the webhook.
func certificateNames(t *testing.T, objs []object, c renderCase) []string {
	t.Helper()
	var names []string
	if !c.selfManaged {
		for _, o := range ofKind(objs, "Certificate") {
			if o.Name == c.fullname+"-webhook-tls" {
				var cert struct {
					Spec struct {
						DNSNames []string `json:"dnsNames"`
					} `json:"spec"`
				}
				if err := yaml.Unmarshal(o.YAML, &cert); err != nil {
					t.Fatal(err)
				}
				names = cert.Spec.DNSNames
			}
		}
		return names
	}
	for _, d := range typedObjects[*appsv1.Deployment](objs) {
		if d.Name != c.fullname+"-webhook" {
			continue
		}
		for _, arg := range d.Spec.Template.Spec.Containers[0].Args {
			if name, ok := strings.CutPrefix(arg, "--tls-dns-name="); ok {
				names = append(names, name)
			}
		}
	}
	return names
}

// TestNetworkPolicies: with networkPolicy.enabled, each component's pods are selected by a
// NetworkPolicy that admits ingress to the webhook port from networkPolicy.webhookFrom, or
// anywhere when it is empty (webhook only), and to the metrics port from networkPolicy.metricsFrom only; the health port and anything else get no
// rule. Without it, no NetworkPolicy.
func TestNetworkPolicies(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, render(t, c))
			policies := typedObjects[*networkingv1.NetworkPolicy](objs)
			if !c.networkPolicy {
				if len(policies) != 0 {
					t.Fatalf("%d NetworkPolicies with networkPolicy.enabled=false", len(policies))
				}
				return
			}
			deployments := typedObjects[*appsv1.Deployment](objs)
			if len(policies) != len(deployments) {
				t.Fatalf("%d NetworkPolicies for %d Deployments, want one each", len(policies), len(deployments))
			}
			for _, d := range deployments {
				var np *networkingv1.NetworkPolicy
				for _, p := range policies {
					selector, err := metav1.LabelSelectorAsSelector(&p.Spec.PodSelector)
					if err != nil {
						t.Fatal(err)
					}
					if selector.Matches(labels.Set(d.Spec.Template.Labels)) {
						if np != nil {
							t.Fatalf("NetworkPolicies %s and %s both select the pods of %s", np.Name, p.Name, d.Name)
						}
						np = p
					}
				}
				if np == nil {
					t.Fatalf("no NetworkPolicy selects the pods of %s", d.Name)
				}
				if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
					t.Errorf("NetworkPolicy %s policyTypes %v, want Ingress only", np.Name, np.Spec.PolicyTypes)
				}
				ports := map[string]int32{} // container port name -> number
				for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
					ports[p.Name] = p.ContainerPort
				}
				want := map[string][]networkingv1.NetworkPolicyPeer{} // port name -> peers (nil: anyone)
				if _, ok := ports["webhook"]; ok {
					want["webhook"] = c.webhookFrom
				}
				if len(c.metricsFrom) > 0 {
					want["https-metrics"] = c.metricsFrom
				}
				got := map[string][]networkingv1.NetworkPolicyPeer{}
				for _, rule := range np.Spec.Ingress {
					for _, p := range rule.Ports {
						if p.Port == nil || p.Port.StrVal == "" || p.Protocol == nil || *p.Protocol != corev1.ProtocolTCP {
							t.Errorf("NetworkPolicy %s rule port %+v, want a named TCP port", np.Name, p)
							continue
						}
						if _, ok := ports[p.Port.StrVal]; !ok {
							t.Errorf("NetworkPolicy %s names port %q, which %s's container lacks", np.Name, p.Port.StrVal, d.Name)
						}
						got[p.Port.StrVal] = append(got[p.Port.StrVal], rule.From...)
					}
					if len(rule.Ports) == 0 {
						t.Errorf("NetworkPolicy %s has a rule for every port: %+v", np.Name, rule)
					}
				}
				if !equality.Semantic.DeepEqual(got, want) {
					t.Errorf("NetworkPolicy %s admits %+v (port: peers, none: anyone), want %+v", np.Name, got, want)
				}
			}
		})
	}
}

// checkCAHoldsNoKey holds that what the webhook's ServiceMonitor reads for the CA holds no private
// key of the CA. Self-managed, the TLS Secret holds the CA's key (selftls.KeyCAKey), so the
// ServiceMonitor reads ca.crt of a ConfigMap that the chart renders empty and that the webhook
// fills with the bundle alone (--tls-ca-configmap; internal/selftls's
// TestTheCAConfigMapHoldsTheBundleAlone). With cert-manager it reads ca.crt of the serving
// certificate's Secret: a Certificate that is not a CA, whose Secret cert-manager gives the
// issuer's certificate and never the issuer's key.
func checkCAHoldsNoKey(t *testing.T, objs []object, c renderCase, secret *corev1.SecretKeySelector, configMap *corev1.ConfigMapKeySelector) {
	t.Helper()
	if !c.selfManaged {
		want := c.fullname + "-webhook-tls"
		if configMap != nil || secret == nil || secret.Name != want || secret.Key != selftls.KeyCABundle {
			t.Fatalf("the webhook's ServiceMonitor reads the CA from Secret %+v, ConfigMap %+v; want %s of Secret %s", secret, configMap, selftls.KeyCABundle, want)
		}
		for _, o := range ofKind(objs, "Certificate") {
			var cert struct {
				Spec struct {
					IsCA       bool   `json:"isCA"`
					SecretName string `json:"secretName"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal(o.YAML, &cert); err != nil {
				t.Fatal(err)
			}
			if cert.Spec.SecretName == secret.Name && cert.Spec.IsCA {
				t.Errorf("the ServiceMonitor reads Secret %s, which holds the key of CA Certificate %s", secret.Name, o.Name)
			}
		}
		return
	}
	want := c.fullname + "-webhook-ca"
	if secret != nil || configMap == nil || configMap.Name != want || configMap.Key != selftls.KeyCABundle {
		t.Fatalf("the webhook's ServiceMonitor reads the CA from Secret %+v, ConfigMap %+v; want %s of ConfigMap %s", secret, configMap, selftls.KeyCABundle, want)
	}
	rendered := false
	for _, cm := range typedObjects[*corev1.ConfigMap](objs) {
		if cm.Name == want {
			rendered = true
			if len(cm.Data) != 0 || len(cm.BinaryData) != 0 {
				t.Errorf("ConfigMap %s is rendered with data %v, want none: the webhook writes ca.crt alone", want, cm.Data)
			}
		}
	}
	if !rendered {
		t.Errorf("ConfigMap %s, which the ServiceMonitor reads, is not rendered", want)
	}
	for _, d := range typedObjects[*appsv1.Deployment](objs) {
		if d.Name == c.fullname+"-webhook" && !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--tls-ca-configmap="+want) {
			t.Errorf("the webhook does not write the CA bundle into ConfigMap %s: args %v", want, d.Spec.Template.Spec.Containers[0].Args)
		}
	}
}

// TestServiceMonitorReadsNoCAKey renders the webhook's ServiceMonitor with either TLS mode and
// holds that the object it reads the CA from holds no key of the CA (checkCAHoldsNoKey).
func TestServiceMonitorReadsNoCAKey(t *testing.T) {
	for _, name := range []string{"defaults: self-managed TLS, webhooks called through the in-cluster Service", "cert-manager with the self-signed and CA issuers the chart creates"} {
		c := renderCases[name]
		t.Run(name, func(t *testing.T) {
			args := []string{"--set", "metrics.serviceMonitor.enabled=true"}
			if c.values != "" {
				args = append(args, "--values", filepath.Join("testdata", "values", c.values))
			}
			out, err := template(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs := objects(t, out)
			found := false
			for _, o := range ofKind(objs, "ServiceMonitor") {
				var sm serviceMonitor
				if err := yaml.Unmarshal(o.YAML, &sm); err != nil {
					t.Fatal(err)
				}
				if o.Name == c.fullname+"-webhook" && len(sm.Spec.Endpoints) == 1 {
					found = true
					ca := sm.Spec.Endpoints[0].TLSConfig.CA
					checkCAHoldsNoKey(t, objs, c, ca.Secret, ca.ConfigMap)
				}
			}
			if !found {
				t.Fatalf("no ServiceMonitor %s-webhook with one endpoint", c.fullname)
			}
		})
	}
}
