package harness

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/daemonguard/daemonguard/internal/serving"
	"github.com/daemonguard/daemonguard/internal/webhookserver"
)

// MetricsPaths are the paths of daemonguard's metrics servers, each behind Kubernetes
// authentication and authorization: what the chart's ClusterRole <fullname>-metrics-reader grants.
var MetricsPaths = []string{serving.MetricsPath, webhookserver.PolicyStatusPath}

// GrantGet creates the ServiceAccount ns/name unless it exists and, with paths, a ClusterRole
// and ClusterRoleBinding <ns>-<name> that let it get those non-resource URLs: the identity of a
// scraper, for tests and local runs that read the metrics servers (MetricsPaths). Without paths
// the ServiceAccount may get nothing.
func GrantGet(ctx context.Context, client kubernetes.Interface, ns, name string, paths ...string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if _, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create serviceaccount %s/%s: %w", ns, name, err)
	}
	if len(paths) == 0 {
		return nil
	}
	roleName := ns + "-" + name
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: roleName},
		Rules:      []rbacv1.PolicyRule{{NonResourceURLs: paths, Verbs: []string{"get"}}},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create clusterrole %s: %w", roleName, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: roleName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create clusterrolebinding %s: %w", roleName, err)
	}
	return nil
}

// Token returns a new token of the ServiceAccount ns/name, valid for an hour.
func Token(ctx context.Context, client kubernetes.Interface, ns, name string) (string, error) {
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("create token for serviceaccount %s/%s: %w", ns, name, err)
	}
	return tr.Status.Token, nil
}

// Scrape GETs url from a metrics server with the bearer token ("" sends none) over a TLS
// connection made with tlsConfig, and returns the HTTP status and the body.
func Scrape(ctx context.Context, url, token string, tlsConfig *tls.Config) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Counter reads the counter name{label="value"} from controller-runtime's registry, where the
// components a test runs in its own process register their metrics; found is false where the
// registry has no such series.
func Counter(name, label, value string) (v float64, found bool, err error) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return 0, false, err
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue(), true, nil
				}
			}
		}
	}
	return 0, false, nil
}
