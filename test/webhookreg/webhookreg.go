// Package webhookreg registers a webhook server that runs on loopback with a test cluster's API
// server, using the product's own configurations (webhook.Configurations), and tells when it is
// in force: when the server completes TLS handshakes (WaitTLS) and when the API server calls it
// (WaitCalled). The harness, the null webhook of the API benchmark, the load generator and
// `localcluster run` all register and wait through it.
package webhookreg

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/webhook"
)

// Register writes the mutating and validating configurations webhook.Configurations builds from
// opts, replacing any of that name left by a run that died before its Unregister. If the second
// create fails, the first configuration is deleted again.
func Register(ctx context.Context, client kubernetes.Interface, opts webhook.ConfigurationOptions) error {
	if err := Unregister(ctx, client, opts.Name); err != nil {
		return err
	}
	mutating, validating := webhook.Configurations(opts)
	adm := client.AdmissionregistrationV1()
	if _, err := adm.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("register mutating webhook %s: %w", opts.Name, err)
	}
	if _, err := adm.ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{}); err != nil {
		return errors.Join(fmt.Errorf("register validating webhook %s: %w", opts.Name, err), Unregister(ctx, client, opts.Name))
	}
	return nil
}

// Unregister deletes both configurations named name; missing ones are no error.
func Unregister(ctx context.Context, client kubernetes.Interface, name string) error {
	adm := client.AdmissionregistrationV1()
	if err := adm.MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("unregister mutating webhook %s: %w", name, err)
	}
	if err := adm.ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("unregister validating webhook %s: %w", name, err)
	}
	return nil
}

// FreePort returns a loopback port free right now, for a webhook server to listen on. Another
// process may take it before the server listens, which the server then fails on.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitTLS waits up to a minute until the server at addr (host:port on 127.0.0.1) completes a TLS
// handshake with a certificate pool trusts, as the API server will. done receives what the
// server returned once it stops: a server that stops first ends the wait at once with its error,
// which is put back for the server's owner.
func WaitTLS(ctx context.Context, addr string, pool *x509.CertPool, done chan error) error {
	dialer := &tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			done <- err
			return false, fmt.Errorf("the server stopped: %v", err)
		default:
		}
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			lastErr = err
			return false, nil
		}
		return true, conn.Close()
	})
	if err != nil {
		return fmt.Errorf("wait for a TLS handshake with %s: %w", addr, errors.Join(err, lastErr))
	}
	return nil
}

// WaitCalled waits up to a minute until the API server, which loads webhook configurations
// asynchronously, answers a server-side dry-run DaemonSet create by calling every DaemonSet
// webhook of the configurations opts builds and getting an answer (called is true), or by calling
// none of them (false). The API server's own call counters tell, so a webhook that changes
// nothing (the null webhook) and one whose mutation an in-process policy also makes are told
// apart as well as daemonguard's.
func WaitCalled(ctx context.Context, client kubernetes.Interface, opts webhook.ConfigurationOptions, called bool) error {
	names := daemonSetWebhooks(opts)
	if err := EnsureProbeNamespace(ctx, client); err != nil {
		return err
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		before, err := scrape(ctx, client)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		_, createErr := client.AppsV1().DaemonSets(ProbeNamespace).Create(ctx, ProbeDaemonSet(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		after, err := scrape(ctx, client)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		done := true
		var seen []string
		for _, name := range names {
			answered := after[name].answered > before[name].answered
			anyCall := after[name].total > before[name].total
			if (called && !answered) || (!called && anyCall) {
				done = false
			}
			seen = append(seen, fmt.Sprintf("%s called %v, answered %v", name, anyCall, answered))
		}
		last = fmt.Sprintf("%s; dry-run create: %v", strings.Join(seen, ", "), createErr)
		return done, nil
	})
	switch {
	case err != nil && called:
		return fmt.Errorf("the API server never called webhooks %v (%s): %w", names, last, err)
	case err != nil:
		return fmt.Errorf("the API server still calls the unregistered webhooks %v (%s): %w", names, last, err)
	}
	return nil
}

// daemonSetWebhooks names the webhooks of opts' configurations that a DaemonSet create reaches.
func daemonSetWebhooks(opts webhook.ConfigurationOptions) []string {
	mutating, validating := webhook.Configurations(opts)
	var names []string
	covers := func(rules []admissionregistrationv1.RuleWithOperations) bool {
		return slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool {
			return slices.Contains(r.Resources, "daemonsets")
		})
	}
	for _, w := range mutating.Webhooks {
		if covers(w.Rules) {
			names = append(names, w.Name)
		}
	}
	for _, w := range validating.Webhooks {
		if covers(w.Rules) {
			names = append(names, w.Name)
		}
	}
	return names
}

// ProbeNamespace is where WaitCalled probes: marked for node agents, so that every DaemonSet
// webhook of daemonguard's configurations is called there, and exempt from none.
const ProbeNamespace = "daemonguard-probe"

// EnsureProbeNamespace creates ProbeNamespace unless it exists.
func EnsureProbeNamespace(ctx context.Context, client kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ProbeNamespace, Labels: map[string]string{admission.NodeAgentsLabel: "true"}}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the probe namespace %s: %w", ProbeNamespace, err)
	}
	return nil
}

// ProbeDaemonSet is the DaemonSet of WaitCalled's dry-run create: plain, with no injection, for
// ProbeNamespace.
func ProbeDaemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "daemonguard-probe"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "probe"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "probe"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "probe:1"}}},
			},
		},
	}
}

// requestMetric counts the API server's webhook calls by webhook name, type, operation, HTTP
// status code (0 when there was no answer) and whether the call rejected the request.
const requestMetric = "apiserver_admission_webhook_request_total"

// calls counts one webhook's calls: all of them, and those it answered (code 200).
type calls struct{ total, answered float64 }

// scrape reads the API server's webhook call counters.
func scrape(ctx context.Context, client kubernetes.Interface) (map[string]calls, error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read API server metrics: %w", err)
	}
	return parseCalls(bytes.NewReader(raw))
}

// parseCalls reads the webhook call counters, by webhook name, from metrics in the Prometheus
// text format.
func parseCalls(r io.Reader) (map[string]calls, error) {
	families, err := ParseMetrics(r)
	if err != nil {
		return nil, err
	}
	out := map[string]calls{}
	for _, m := range families[requestMetric].GetMetric() {
		var name, code string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "name":
				name = l.GetValue()
			case "code":
				code = l.GetValue()
			}
		}
		c := out[name]
		c.total += m.GetCounter().GetValue()
		if code == "200" {
			c.answered += m.GetCounter().GetValue()
		}
		out[name] = c
	}
	return out, nil
}

// ParseMetrics reads the API server's metrics, in the Prometheus text format, by family name.
func ParseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse API server metrics: %w", err)
	}
	return families, nil
}
