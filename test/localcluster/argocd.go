package localcluster

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// ArgoCD is a real Argo CD running as components of a Cluster: its CRDs of the version pinned in
// tools/argocd/go.mod, the application controller and the repo server built from that module (and,
// when asked, its ApplicationSet controller), and Debian's redis-server as their cache. Argo CD's
// API server, UI and Dex do not run: Applications are objects written with the cluster's clients.
type ArgoCD struct {
	// Namespace is Argo CD's own namespace: Applications, ApplicationSets, argocd-cm, the cluster
	// Secrets.
	Namespace string
	// Server is the destination server of this cluster for Applications. Argo CD's in-cluster
	// destination https://kubernetes.default.svc needs in-cluster credentials a process on the
	// host lacks, so the local API server is registered as a cluster Secret under its own URL.
	Server string
	// ControllerLog and RepoServerLog are the components' log files; ApplicationSetLog is the
	// ApplicationSet controller's, "" unless ArgoCDOptions.ApplicationSets.
	ControllerLog, RepoServerLog, ApplicationSetLog string

	c        *Cluster
	procs    []*process // redis, repo server, controller
	stopOnce sync.Once
}

// ArgoCDOptions configures StartArgoCD.
type ArgoCDOptions struct {
	// ConfigData is argocd-cm's data, e.g. resource.customizations.health.<group>_<kind> entries.
	ConfigData map[string]string
	// Clusters are the destination clusters registered in Argo CD, each as a cluster Secret with
	// its name and labels (what an ApplicationSet's cluster generator selects on). The cluster
	// that runs Argo CD may be one of them; empty registers that cluster alone, named "local".
	Clusters []ArgoCDCluster
	// ApplicationSets starts the ApplicationSet controller too, with progressive syncs
	// (strategy RollingSync) enabled.
	ApplicationSets bool
}

// ArgoCDCluster is a destination cluster registered in Argo CD.
type ArgoCDCluster struct {
	// Name is the cluster's name in Argo CD (the cluster generator's {{.name}}); unique.
	Name string
	// Cluster is the local cluster; Argo CD reaches its API server at Cluster.RESTConfig.Host.
	Cluster *Cluster
	// Labels are the cluster Secret's labels (the cluster generator's selector and
	// {{.metadata.labels.<key>}}).
	Labels map[string]string
}

// ErrRedisMissing is returned by StartArgoCD when Debian's redis-server is not installed; tests
// skip on it. `make testbin` installs the package when it runs as root.
var ErrRedisMissing = errors.New("redis-server is not on PATH: install Debian's redis-server package " +
	"(`make testbin` does when run as root), Argo CD's application controller and repo server need it")

// ArgoCDNamespace is where StartArgoCD installs Argo CD.
const ArgoCDNamespace = "argocd"

const (
	argoCDFieldManager = "daemonguard-localcluster"
	argoCDReadyTimeout = 2 * time.Minute
	argoCDControllerSA = "argocd-application-controller"
	// argoCDManagerSA is the ServiceAccount Argo CD uses in a destination cluster other than its
	// own, in kube-system, as `argocd cluster add` creates it.
	argoCDManagerSA   = "argocd-manager"
	argoCDLocalName   = "local"
	argoCDPartOfLabel = "app.kubernetes.io/part-of"
)

var appProjectResource = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "appprojects"}

// StartArgoCD installs Argo CD's CRDs (Application, AppProject, ApplicationSet) and the objects
// its API server would normally create (argocd-cm, argocd-secret, the AppProject default, the
// cluster Secrets of opts.Clusters or of this cluster), starts redis-server, the repo server, the
// application controller and, with opts.ApplicationSets, the ApplicationSet controller, and waits
// until each serves.
// Logs are Dir/logs/argocd-*.log and redis.log; the processes die with the process that owns the
// cluster and stop with Stop or Cluster.Stop. Start at most one per cluster.
//
// The controller runs with --persist-resource-health, so status.resources[].health of an
// Application carries each resource's health (Argo CD 3 keeps it out of the status otherwise).
// The repo server finds helm (built from tools/helm) and git on PATH and renders Helm charts
// from git; it has no kustomize.
func (c *Cluster) StartArgoCD(ctx context.Context, opts ArgoCDOptions) (*ArgoCD, error) {
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrRedisMissing
	}
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("git is not on PATH; Argo CD's repo server needs it: %w", err)
	}
	bins, err := toolbin.Ensure(ctx, c.log, toolbin.ArgoCDBinary, toolbin.ArgoCDCRDs, "helm")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, argoCDReadyTimeout)
	defer cancel()
	if err := c.installCRDs(ctx, bins.Path(toolbin.ArgoCDCRDs)); err != nil {
		return nil, fmt.Errorf("install Argo CD CRDs: %w", err)
	}
	a := &ArgoCD{Namespace: ArgoCDNamespace, Server: c.RESTConfig.Host, c: c}
	if err := a.installObjects(ctx, opts); err != nil {
		return nil, fmt.Errorf("install Argo CD's objects: %w", err)
	}

	ports, err := freePorts(7)
	if err != nil {
		return nil, err
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	repoAddr := "127.0.0.1:" + strconv.Itoa(ports[1])
	controllerHealth := "http://127.0.0.1:" + strconv.Itoa(ports[3]) + "/healthz"
	logDir := filepath.Join(c.Dir, "logs")
	home := filepath.Join(c.Dir, "argocd-home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, err
	}
	// A cache, not a store: nothing is saved to disk.
	redisArgs := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(ports[0]), "--save", "", "--appendonly", "no",
		"--dir", home, "--protected-mode", "no"}
	if err := a.start(ctx, "redis", redis, redisArgs, nil, logDir, func(context.Context) error { return dialTCP(redisAddr) }); err != nil {
		return nil, err
	}
	// The repo server runs helm and git; helm keeps its caches and config under the cluster's
	// folder instead of the user's home.
	env := append(os.Environ(),
		"PATH="+filepath.Dir(bins.Path("helm"))+string(os.PathListSeparator)+filepath.Dir(git)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home,
		"HELM_CACHE_HOME="+filepath.Join(home, "helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "helm-config"),
		"HELM_DATA_HOME="+filepath.Join(home, "helm-data"),
		"TMPDIR="+home,
		// Otherwise the repo server exits looking for /app/config/gpg/keys.
		"ARGOCD_GPG_ENABLED=false",
	)
	repoArgs := []string{"repo-server", "--disable-tls", "--address", "127.0.0.1", "--port", strconv.Itoa(ports[1]),
		"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(ports[2]), "--redis", redisAddr,
		"--logformat", "text", "--loglevel", "info", "--parallelismlimit", "2"}
	if err := a.start(ctx, "argocd-repo-server", bins.Path(toolbin.ArgoCDBinary), repoArgs, env, logDir,
		func(context.Context) error { return dialTCP(repoAddr) }); err != nil {
		return nil, err
	}
	a.RepoServerLog = a.procs[len(a.procs)-1].logPath
	controllerArgs := []string{"application-controller", "--kubeconfig", c.KubeconfigPath, "--namespace", a.Namespace,
		"--repo-server", repoAddr, "--repo-server-plaintext", "--redis", redisAddr,
		"--metrics-port", strconv.Itoa(ports[3]), "--persist-resource-health",
		// Two cores: a handful of Applications at most.
		"--status-processors", "2", "--operation-processors", "2", "--kubectl-parallelism-limit", "2",
		"--logformat", "text", "--loglevel", "info"}
	if err := a.start(ctx, "argocd-application-controller", bins.Path(toolbin.ArgoCDBinary), controllerArgs, env, logDir,
		func(ctx context.Context) error { return httpOK(ctx, controllerHealth) }); err != nil {
		return nil, err
	}
	a.ControllerLog = a.procs[len(a.procs)-1].logPath
	fmt.Fprintf(c.log, "Argo CD application controller and repo server ready (logs: %s, %s)\n", a.ControllerLog, a.RepoServerLog)
	if !opts.ApplicationSets {
		return a, nil
	}
	// Its manager reads the kubeconfig from KUBECONFIG (controller-runtime's own flag is not
	// cobra's); the webhook server it always starts listens on loopback too.
	appsetMetrics := "127.0.0.1:" + strconv.Itoa(ports[4])
	appsetArgs := []string{"applicationset-controller", "--kubeconfig", c.KubeconfigPath, "--namespace", a.Namespace,
		"--argocd-repo-server", repoAddr, "--repo-server-plaintext", "--enable-progressive-syncs",
		"--metrics-addr", appsetMetrics, "--probe-addr", "127.0.0.1:" + strconv.Itoa(ports[5]),
		"--webhook-addr", "127.0.0.1:" + strconv.Itoa(ports[6]),
		// No SCM or pull-request generators here: nothing may call out.
		"--enable-scm-providers=false", "--concurrent-reconciliations", "2",
		"--logformat", "text", "--loglevel", "info"}
	if err := a.start(ctx, "argocd-applicationset-controller", bins.Path(toolbin.ArgoCDBinary), appsetArgs,
		append(env, "KUBECONFIG="+c.KubeconfigPath), logDir,
		func(ctx context.Context) error { return httpOK(ctx, "http://"+appsetMetrics+"/metrics") }); err != nil {
		return nil, err
	}
	a.ApplicationSetLog = a.procs[len(a.procs)-1].logPath
	fmt.Fprintf(c.log, "Argo CD ApplicationSet controller ready, progressive syncs enabled (log: %s)\n", a.ApplicationSetLog)
	return a, nil
}

// start runs one component, makes it part of the cluster and waits until ready returns nil. On
// error every component started so far is stopped.
func (a *ArgoCD) start(ctx context.Context, name, bin string, args, env []string, logDir string, ready func(context.Context) error) error {
	p, err := startProcessEnv(name, bin, args, env, logDir)
	if err != nil {
		a.Stop()
		return err
	}
	a.procs = append(a.procs, p)
	if err := a.c.addProcess(p); err != nil {
		a.Stop()
		return err
	}
	var last error
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		last = ready(ctx)
		return last == nil, nil
	})
	if err != nil {
		a.Stop()
		return fmt.Errorf("wait for %s (log: %s): %w (last: %v)", name, p.logPath, err, last)
	}
	return nil
}

// Stop terminates the controller, the repo server and Redis, in that order; Argo CD's objects
// and what it synced stay. Safe to call more than once.
func (a *ArgoCD) Stop() {
	a.stopOnce.Do(func() {
		for i := len(a.procs) - 1; i >= 0; i-- {
			a.c.stopProcess(a.procs[i])
		}
	})
}

// Exited returns an error with the end of its log if a component has exited, nil while all run.
func (a *ArgoCD) Exited() error {
	for _, p := range a.procs {
		if err := p.exitedErr(); err != nil {
			return err
		}
	}
	return nil
}

// installObjects creates what Argo CD's install manifests and API server normally provide.
func (a *ArgoCD) installObjects(ctx context.Context, opts ArgoCDOptions) error {
	c := a.c
	if err := c.CreateNamespace(ctx, a.Namespace); err != nil {
		return err
	}
	partOf := map[string]string{argoCDPartOfLabel: "argocd"}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Namespace: a.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "argocd-cm", argoCDPartOfLabel: "argocd"}},
		Data: opts.ConfigData,
	}
	if _, err := c.Client.CoreV1().ConfigMaps(a.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create argocd-cm: %w", err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Namespace: a.Namespace, Labels: partOf}}
	if _, err := c.Client.CoreV1().Secrets(a.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create argocd-secret: %w", err)
	}

	// The AppProject default, as Argo CD's API server creates it: any source, any destination.
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": "default", "namespace": a.Namespace},
		"spec": map[string]any{
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"server": "*", "namespace": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
		},
	}}
	if _, err := dyn.Resource(appProjectResource).Namespace(a.Namespace).Create(ctx, project, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create AppProject default: %w", err)
	}

	clusters := opts.Clusters
	if len(clusters) == 0 {
		clusters = []ArgoCDCluster{{Name: argoCDLocalName, Cluster: c}}
	}
	names := map[string]bool{}
	for _, dest := range clusters {
		if dest.Name == "" || dest.Cluster == nil || names[dest.Name] {
			return fmt.Errorf("cluster %q: every registered cluster needs a cluster and a unique name", dest.Name)
		}
		names[dest.Name] = true
		if err := a.registerCluster(ctx, dest); err != nil {
			return fmt.Errorf("register cluster %s: %w", dest.Name, err)
		}
	}
	return nil
}

// registerCluster creates the cluster Secret of dest in Argo CD's namespace: its API server's
// URL, its CA and the token of a ServiceAccount bound to cluster-admin in dest, as in Argo CD's
// own install (the controller applies whatever git holds). In Argo CD's own cluster that is the
// application controller's ServiceAccount; elsewhere kube-system/argocd-manager, as
// `argocd cluster add` creates it.
func (a *ArgoCD) registerCluster(ctx context.Context, dest ArgoCDCluster) error {
	target := dest.Cluster
	saNS, saName := metav1.NamespaceSystem, argoCDManagerSA
	if target == a.c {
		saNS, saName = a.Namespace, argoCDControllerSA
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: saName, Namespace: saNS}}
	if _, err := target.Client.CoreV1().ServiceAccounts(saNS).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceAccount %s/%s: %w", saNS, saName, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: saName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: saName, Namespace: saNS}},
	}
	if _, err := target.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ClusterRoleBinding %s: %w", saName, err)
	}
	tr, err := target.Client.CoreV1().ServiceAccounts(saNS).CreateToken(ctx, saName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create token for %s/%s: %w", saNS, saName, err)
	}
	config, err := json.Marshal(map[string]any{
		"bearerToken":     tr.Status.Token,
		"tlsClientConfig": map[string]any{"caData": base64.StdEncoding.EncodeToString(target.pki.CACertPEM)},
	})
	if err != nil {
		return err
	}
	labels := map[string]string{}
	maps.Copy(labels, dest.Labels)
	labels["argocd.argoproj.io/secret-type"] = "cluster"
	labels[argoCDPartOfLabel] = "argocd"
	clusterSecret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-" + dest.Name, Namespace: a.Namespace, Labels: labels},
		StringData: map[string]string{"name": dest.Name, "server": target.RESTConfig.Host, "config": string(config)},
	}
	if _, err := a.c.Client.CoreV1().Secrets(a.Namespace).Create(ctx, clusterSecret, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create the cluster Secret: %w", err)
	}
	return nil
}

func dialTCP(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
}

func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}

// HardRefresh asks the controller to re-read git and re-render the manifests of an Application
// now (annotation argocd.argoproj.io/refresh: hard, which the controller removes when done).
// Without it a new commit is seen only when the repo server's revision cache expires.
func (a *ArgoCD) HardRefresh(ctx context.Context, app string) error {
	dyn, err := dynamic.NewForConfig(a.c.RESTConfig)
	if err != nil {
		return err
	}
	patch := []byte(`{"metadata":{"annotations":{"argocd.argoproj.io/refresh":"hard"}}}`)
	_, err = dyn.Resource(ApplicationResource).Namespace(a.Namespace).Patch(ctx, app, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// ApplicationResource is Argo CD's Application resource.
var ApplicationResource = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"}

// ApplicationSetResource is Argo CD's ApplicationSet resource.
var ApplicationSetResource = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applicationsets"}
