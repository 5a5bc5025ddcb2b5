package selftls

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Options say where the TLS material lives.
type Options struct {
	// Namespace and SecretName locate the Secret holding the CA and the serving certificate.
	Namespace  string
	SecretName string
	// WebhookConfigurationName names the MutatingWebhookConfiguration and the
	// ValidatingWebhookConfiguration whose caBundle this writes (both have that name).
	WebhookConfigurationName string
	// CertDir receives tls.crt and tls.key for the webhook server's certwatcher.
	CertDir string
	// CAConfigMapName, when set, names a ConfigMap of Namespace that receives the CA bundle alone
	// (ca.crt): what a scraper verifies the serving certificate with (the chart's ServiceMonitor),
	// without reading the Secret, which also holds the CA's private key and the serving key. The
	// ConfigMap must exist (the chart renders it); one that does not is left out, not created.
	CAConfigMapName string
	Config          Config
}

// Validate reports missing options.
func (o Options) Validate() error {
	switch {
	case o.Namespace == "":
		return errors.New("self-managed TLS needs the namespace of its Secret")
	case o.SecretName == "":
		return errors.New("self-managed TLS needs --tls-secret")
	case o.WebhookConfigurationName == "":
		return errors.New("self-managed TLS needs --webhook-configuration (the name of the webhook configurations to write the CA bundle into)")
	case o.CertDir == "":
		return errors.New("self-managed TLS needs --cert-dir to write the serving certificate to")
	}
	return o.Config.Validate()
}

// CacheOptions restrict the manager's cache to the one Secret and the two webhook configurations,
// so the webhook needs no namespace-wide Secret access and caches nothing else of those kinds.
func CacheOptions(o Options) map[client.Object]cache.ByObject {
	byName := func(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }
	return map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Namespaces: map[string]cache.Config{o.Namespace: {FieldSelector: byName(o.SecretName)}}},
		&admissionregistrationv1.MutatingWebhookConfiguration{}:   {Field: byName(o.WebhookConfigurationName)},
		&admissionregistrationv1.ValidatingWebhookConfiguration{}: {Field: byName(o.WebhookConfigurationName)},
	}
}

// Rotator keeps the Secret, the webhook configurations' caBundle and the files in step. Every
// replica runs one: writes are guarded by resourceVersion, so replicas need no leader.
type Rotator struct {
	Options
	Client client.Client
	Log    logr.Logger
	// clock is a test seam.
	clock clock.PassiveClock

	mu sync.Mutex
	// shared is the bundle last written to the CA ConfigMap by this process: written again only
	// when it changes, not on every sync.
	shared []byte
}

// NewRotator returns a Rotator on the real clock.
func NewRotator(c client.Client, opts Options, log logr.Logger) *Rotator {
	registerMetrics()
	opts.Config = opts.Config.WithDefaults()
	return &Rotator{Options: opts, Client: c, Log: log, clock: clock.RealClock{}}
}

// Bootstrap makes sure a usable serving certificate is on disk before the webhook server starts
// (its certwatcher cannot start without one). reader must read from the API server directly, as
// the manager's cache is not running yet. Missing RBAC fails at once with the denied request.
func (r *Rotator) Bootstrap(ctx context.Context, reader client.Reader) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := r.sync(ctx, reader)
		if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
			return false, err
		}
		last = err
		if err != nil {
			r.Log.Info("Retrying TLS bootstrap", "error", err.Error())
			return false, nil
		}
		return r.filesUsable(), nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w (last error: %v)", err, last)
		}
		return fmt.Errorf("bootstrap self-managed TLS from secret %s/%s: %w", r.Namespace, r.SecretName, err)
	}
	return nil
}

// SetupWithManager watches the Secret and both webhook configurations: a caBundle reset by hand or
// by a chart upgrade is written back at once.
func (r *Rotator) SetupWithManager(mgr ctrl.Manager) error {
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.SecretName}
	toSecret := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: key}}
	})
	named := func(name string) predicate.Predicate {
		return predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == name })
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("webhook-tls").
		For(&corev1.Secret{}, builder.WithPredicates(named(r.SecretName))).
		Watches(&admissionregistrationv1.MutatingWebhookConfiguration{}, toSecret, builder.WithPredicates(named(r.WebhookConfigurationName))).
		Watches(&admissionregistrationv1.ValidatingWebhookConfiguration{}, toSecret, builder.WithPredicates(named(r.WebhookConfigurationName))).
		// Every replica writes its own files, so this runs on followers too. A process may run the
		// webhook server more than once (tests, restarts in place).
		WithOptions(controller.Options{NeedLeaderElection: ptr.To(false), SkipNameValidation: ptr.To(true)}).
		Complete(r)
}

// Reconcile takes one rotation step.
func (r *Rotator) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	after, err := r.sync(ctx, r.Client)
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		// Another replica wrote first; decide again on what it wrote.
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: after}, nil
}

// sync is gather → Decide → apply. It returns when to look again.
func (r *Rotator) sync(ctx context.Context, reader client.Reader) (time.Duration, error) {
	now := r.clock.Now()
	log := r.Log.WithValues("secret", klogRef(r.Namespace, r.SecretName))

	// Gather.
	var secret *corev1.Secret
	s := &corev1.Secret{}
	switch err := reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: r.SecretName}, s); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return 0, fmt.Errorf("read secret %s/%s: %w", r.Namespace, r.SecretName, err)
	default:
		secret = s
	}
	configs, err := r.getConfigurations(ctx, reader)
	if err != nil {
		return 0, err
	}
	m := parseSecret(secret)
	m.state.ConfigurationsFound = configs.found()
	m.state.Published = configs.found() && len(m.bundle) > 0 && configs.carry(m.bundle)

	// Decide.
	step := Decide(m.state, r.Config, now)

	// Apply: the Secret, then the webhook configurations, then the files.
	if step.Changed(m.state) {
		secret, err = r.writeSecret(ctx, secret, m, step, now)
		if err != nil {
			return 0, err
		}
		log.Info("Updated webhook TLS secret", "reasons", step.Reasons, "newCA", step.NewCA, "issuedCertificate", step.IssueLeaf)
		m = parseSecret(secret)
	} else if step.Waiting != "" {
		log.V(1).Info("Waiting to rotate", "reason", step.Waiting)
	}
	if configs.found() && !configs.carry(m.bundle) {
		if err := r.publish(ctx, configs, m.bundle); err != nil {
			return 0, err
		}
		log.Info("Published CA bundle to webhook configurations", "name", r.WebhookConfigurationName, "cas", len(m.state.Bundle))
	}
	if err := r.shareBundle(ctx, m.bundle); err != nil {
		return 0, err
	}
	if err := r.writeFiles(secret); err != nil {
		return 0, err
	}
	recordExpiry(m.state)
	return step.RequeueAfter, nil
}

type configurations struct {
	mutating   *admissionregistrationv1.MutatingWebhookConfiguration
	validating *admissionregistrationv1.ValidatingWebhookConfiguration
}

func (c configurations) found() bool { return c.mutating != nil && c.validating != nil }

// carry says every webhook of both configurations trusts exactly bundle.
func (c configurations) carry(bundle []byte) bool {
	for _, w := range c.mutating.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			return false
		}
	}
	for _, w := range c.validating.Webhooks {
		if !bytes.Equal(w.ClientConfig.CABundle, bundle) {
			return false
		}
	}
	return true
}

func (r *Rotator) getConfigurations(ctx context.Context, reader client.Reader) (configurations, error) {
	var c configurations
	var err error
	key := types.NamespacedName{Name: r.WebhookConfigurationName}
	if c.mutating, err = getIfExists[admissionregistrationv1.MutatingWebhookConfiguration](ctx, reader, key); err != nil {
		return c, fmt.Errorf("read mutatingwebhookconfiguration %s: %w", key.Name, err)
	}
	if c.validating, err = getIfExists[admissionregistrationv1.ValidatingWebhookConfiguration](ctx, reader, key); err != nil {
		return c, fmt.Errorf("read validatingwebhookconfiguration %s: %w", key.Name, err)
	}
	return c, nil
}

// getIfExists reads the object named key, or returns nil where there is none: a configuration the
// chart does not render is no error.
func getIfExists[T any, PT interface {
	*T
	client.Object
}](ctx context.Context, reader client.Reader, key types.NamespacedName) (PT, error) {
	obj := PT(new(T))
	if err := reader.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			err = nil
		}
		return nil, err
	}
	return obj, nil
}

func (r *Rotator) writeSecret(ctx context.Context, old *corev1.Secret, m material, step RotationStep, now time.Time) (*corev1.Secret, error) {
	data, publishedAt, err := render(old, m, step, r.Config, now)
	if err != nil {
		return nil, err
	}
	if old == nil {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: r.SecretName, Namespace: r.Namespace,
				Labels: map[string]string{LabelManagedBy: "daemonguard"},
			},
			Type: corev1.SecretTypeTLS,
			Data: data,
		}
		setAnnotation(s, AnnotationBundlePublishedAt, publishedAt)
		if err := r.Client.Create(ctx, s); err != nil {
			return nil, fmt.Errorf("create secret %s/%s: %w", r.Namespace, r.SecretName, err)
		}
		return s, nil
	}
	s := old.DeepCopy()
	s.Data = data
	setAnnotation(s, AnnotationBundlePublishedAt, publishedAt)
	if err := r.Client.Update(ctx, s); err != nil { // resourceVersion guards against other replicas
		return nil, fmt.Errorf("update secret %s/%s: %w", r.Namespace, r.SecretName, err)
	}
	return s, nil
}

func setAnnotation(s *corev1.Secret, key, value string) {
	if value == "" {
		delete(s.Annotations, key)
		return
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[key] = value
}

func (r *Rotator) publish(ctx context.Context, c configurations, bundle []byte) error {
	m := c.mutating.DeepCopy()
	for i := range m.Webhooks {
		m.Webhooks[i].ClientConfig.CABundle = bundle
	}
	if err := r.Client.Update(ctx, m); err != nil {
		return fmt.Errorf("write caBundle into mutatingwebhookconfiguration %s: %w", m.Name, err)
	}
	v := c.validating.DeepCopy()
	for i := range v.Webhooks {
		v.Webhooks[i].ClientConfig.CABundle = bundle
	}
	if err := r.Client.Update(ctx, v); err != nil {
		return fmt.Errorf("write caBundle into validatingwebhookconfiguration %s: %w", v.Name, err)
	}
	return nil
}

// shareBundle writes bundle as ca.crt of the CA ConfigMap (CAConfigMapName), if this process has
// not written that bundle yet: a merge patch of that one key, so that the ConfigMap never holds
// anything of the Secret but the CA certificates. A missing ConfigMap is logged and left out:
// nothing that serves admission depends on it.
func (r *Rotator) shareBundle(ctx context.Context, bundle []byte) error {
	if r.CAConfigMapName == "" || len(bundle) == 0 {
		return nil
	}
	r.mu.Lock()
	done := bytes.Equal(r.shared, bundle)
	r.mu.Unlock()
	if done {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"data": map[string]string{KeyCABundle: string(bundle)}})
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.CAConfigMapName}}
	switch err := r.Client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); {
	case apierrors.IsNotFound(err):
		r.Log.Info("Left out the CA ConfigMap: it does not exist", "configmap", klogRef(r.Namespace, r.CAConfigMapName))
	case err != nil:
		return fmt.Errorf("write the CA bundle into configmap %s/%s: %w", r.Namespace, r.CAConfigMapName, err)
	default:
		r.Log.Info("Wrote CA bundle to ConfigMap", "configmap", klogRef(r.Namespace, r.CAConfigMapName))
	}
	r.mu.Lock()
	r.shared = bytes.Clone(bundle)
	r.mu.Unlock()
	return nil
}

// writeFiles puts the Secret's serving certificate where certwatcher reads it, if it differs. The
// key goes first and each file is replaced by a rename, so certwatcher never reads half a file; a
// read between the two renames sees a mismatched pair, which certwatcher rejects, keeping the old
// certificate until the second rename's event.
func (r *Rotator) writeFiles(s *corev1.Secret) error {
	if s == nil || len(s.Data[corev1.TLSCertKey]) == 0 || len(s.Data[corev1.TLSPrivateKeyKey]) == 0 {
		return nil
	}
	if err := os.MkdirAll(r.CertDir, 0o700); err != nil {
		return fmt.Errorf("create cert dir: %w", err)
	}
	for _, name := range []string{corev1.TLSPrivateKeyKey, corev1.TLSCertKey} {
		path := filepath.Join(r.CertDir, name)
		if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, s.Data[name]) {
			continue
		}
		tmp, err := os.CreateTemp(r.CertDir, "."+name+"-*")
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		_, werr := tmp.Write(s.Data[name])
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Rename(tmp.Name(), path)); err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("write %s: %w", path, err)
		}
		r.Log.Info("Wrote serving certificate file", "path", path)
	}
	return nil
}

// filesUsable says the folder holds a matching, currently valid certificate and key.
func (r *Rotator) filesUsable() bool {
	certPEM, err1 := os.ReadFile(filepath.Join(r.CertDir, corev1.TLSCertKey))
	keyPEM, err2 := os.ReadFile(filepath.Join(r.CertDir, corev1.TLSPrivateKeyKey))
	if err1 != nil || err2 != nil {
		return false
	}
	m := parseSecret(&corev1.Secret{Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM}})
	now := r.clock.Now()
	return m.state.Leaf != nil && m.state.LeafKeyValid && !now.Before(m.state.Leaf.NotBefore) && now.Before(m.state.Leaf.NotAfter)
}

func klogRef(ns, name string) string { return ns + "/" + name }

var certificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "daemonguard_webhook_certificate_expiry_timestamp_seconds",
	Help: "When the self-managed webhook serving certificate (kind=serving) and the newest CA (kind=ca) expire, as a Unix time.",
}, []string{"kind"})

// registerMetrics registers the certificate expiry once a rotator exists (webhook replicas with
// self-managed TLS): the controller runs the same binary, and has no such certificate.
var registerMetrics = sync.OnceFunc(func() { metrics.Registry.MustRegister(certificateExpiry) })

func recordExpiry(st State) {
	set := func(kind string, c *x509.Certificate) {
		if c != nil {
			certificateExpiry.WithLabelValues(kind).Set(float64(c.NotAfter.Unix()))
		}
	}
	set("serving", st.Leaf)
	if len(st.Bundle) > 0 {
		set("ca", st.Bundle[0])
	}
}
