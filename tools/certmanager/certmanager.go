// Package certmanager runs cert-manager's controllers for the local test cluster, wired the way
// cert-manager's cmd/controller/app (controller.NewContextFactory, controller.Known) and
// cmd/cainjector/app (a controller-runtime manager, cainjector.RegisterAllInjectors) wire them.
// Those cmd folders are modules that are not on the Go module proxy, so the wiring is redone here;
// every controller that runs is cert-manager's own package at the version in go.mod.
package certmanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	crapprover "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"         // registers the CA issuer type
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned" // registers the selfSigned issuer type
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
)

// Controllers are the cert-manager controllers Run starts: Issuer and ClusterIssuer status, the
// Certificate issuing path, the CertificateRequest approver and the selfSigned and CA signers.
// ACME, Vault, Venafi, the ingress and Gateway shims, the certificate metrics and the experimental
// CertificateSigningRequest signers are not started.
var Controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
	crapprover.ControllerName,
	crselfsigned.CRControllerName,
	crca.CRControllerName,
}

// Options configures Run.
type Options struct {
	// Kubeconfig is the kubeconfig file of the cluster to run against.
	Kubeconfig string
	// ClusterResourceNamespace holds the Secrets that ClusterIssuers refer to.
	ClusterResourceNamespace string
	// ReadyFile, when set, is written once the informers of both halves have synced, so a
	// supervisor can wait for it without a port.
	ReadyFile string
}

// cert-manager's defaults for the flags this wiring does not expose
// (internal/apis/config/controller/v1alpha1/defaults.go).
const (
	kubernetesAPIQPS       = 20
	kubernetesAPIBurst     = 50
	workersPerController   = 5
	requestMinimumBackoff  = time.Hour
	requestMaximumBackoff  = 32 * time.Hour
	cainjectorUserAgentTag = "cainjector"
)

// Run starts the controllers and the cainjector and blocks until ctx is cancelled (a clean exit,
// nil) or one of them fails. cert-manager's CRDs must already be installed.
func Run(ctx context.Context, opts Options) error {
	if opts.Kubeconfig == "" {
		return errors.New("a kubeconfig is required")
	}
	ctrl.SetLogger(logf.Log)
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	g, ctx := errgroup.WithContext(ctx)

	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         opts.Kubeconfig,
		KubernetesAPIQPS:   kubernetesAPIQPS,
		KubernetesAPIBurst: kubernetesAPIBurst,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: opts.ClusterResourceNamespace},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: requestMinimumBackoff,
			CertificateRequestMaximumBackoffDuration: requestMaximumBackoff,
		},
	})
	if err != nil {
		return fmt.Errorf("build controller context: %w", err)
	}
	base, err := factory.Build()
	if err != nil {
		return fmt.Errorf("build controller context: %w", err)
	}
	// Constructing a controller registers its informers with the shared factories, so every
	// controller is built before the factories start.
	for _, name := range Controllers {
		construct, ok := controller.Known()[name]
		if !ok {
			return fmt.Errorf("controller %s is not registered", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("construct controller %s: %w", name, err)
		}
		g.Go(func() error {
			if err := c.Run(workersPerController, ctx); err != nil {
				return fmt.Errorf("run controller %s: %w", name, err)
			}
			return nil
		})
	}

	mgr, err := newCAInjector(ctx, opts.Kubeconfig)
	if err != nil {
		return err
	}
	g.Go(func() error {
		if err := mgr.Start(ctx); err != nil {
			return fmt.Errorf("run cainjector: %w", err)
		}
		return nil
	})

	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	g.Go(func() error { return markReady(ctx, opts.ReadyFile, base, mgr) })

	logf.Log.Info("Started cert-manager controllers and cainjector", "controllers", Controllers)
	err = g.Wait()
	base.SharedInformerFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	if err != nil {
		return err
	}
	logf.Log.Info("Stopped cert-manager controllers and cainjector")
	return nil
}

// newCAInjector builds the cainjector's manager as cmd/cainjector/app does, with every injectable
// kind enabled, Certificates as a data source, no leader election and no metrics listener.
func newCAInjector(ctx context.Context, kubeconfig string) (ctrl.Manager, error) {
	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, cainjectorUserAgentTag)
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache:  cache.Options{ReaderFailOnMissingInformer: true},
		// As upstream: Secrets are read directly and watched as metadata only, never cached whole.
		Client:  client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		Metrics: metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return nil, fmt.Errorf("create cainjector manager: %w", err)
	}
	// Upstream polls for the Certificate CRD; here the CRDs are installed before the process starts,
	// so a missing one is an error worth failing on at once.
	certificates := schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}
	if _, err := mgr.GetRESTMapper().RESTMapping(certificates, "v1"); err != nil {
		return nil, fmt.Errorf("find the Certificate kind (install cert-manager's CRDs first): %w", err)
	}
	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   true,
			cainjector.ValidatingWebhookConfigurationName: true,
			cainjector.APIServiceName:                     true,
			cainjector.CustomResourceDefinitionName:       true,
		},
	}); err != nil {
		return nil, fmt.Errorf("register cainjector reconcilers: %w", err)
	}
	return mgr, nil
}

// markReady writes path once the controllers' informers and the cainjector's cache have synced.
// Objects created earlier are not missed either way (informers list before they watch); ready
// means connected, with cert-manager's kinds known, and about to reconcile.
func markReady(ctx context.Context, path string, base *controller.Context, mgr ctrl.Manager) error {
	// The factories' waits end early, unsynced, only when ctx is cancelled: a clean shutdown.
	base.SharedInformerFactory.WaitForCacheSync(ctx.Done())
	base.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done())
	if ctx.Err() != nil {
		return nil
	}
	select {
	case <-mgr.Elected(): // with leader election off: every cainjector controller has started
	case <-ctx.Done():
		return nil
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return nil // cancelled
	}
	logf.Log.Info("Synced informers; cert-manager is ready")
	if path == "" {
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte("ready\n"), 0o644); err != nil {
		return fmt.Errorf("write ready file: %w", err)
	}
	if err := os.Rename(tmp, filepath.Clean(path)); err != nil {
		return fmt.Errorf("write ready file: %w", err)
	}
	return nil
}
