package toolbin

import (
	"fmt"
	"strings"
)

// KubernetesVersion is the version of the control plane built from tools/kube: the newest
// Kubernetes release, which every test runs against unless asked for another (KubernetesVersions).
const KubernetesVersion = "v1.37.2"

// OldestKubernetesVersion is the version of the control plane built from tools/kube-1.33: the
// oldest minor daemonguard supports, which the version suites run against.
const OldestKubernetesVersion = "v1.33.13"

// KubernetesVersions are the control planes the tools modules build, newest first.
var KubernetesVersions = []string{KubernetesVersion, OldestKubernetesVersion}

// ControlPlaneBinary names the binary of a control-plane component (kube-apiserver,
// kube-controller-manager, kube-scheduler) of one of KubernetesVersions: the newest release's under
// the component's own name, an older one's with its minor appended (kube-apiserver-1.33), so both
// can be asked for at once.
func ControlPlaneBinary(component, version string) string {
	if version == KubernetesVersion {
		return component
	}
	return component + "-" + minorOf(version)
}

// KubernetesRelease returns the one of KubernetesVersions that version names: by its version or
// its minor (v1.33.13, 1.33, v1.33), or as "newest" or "oldest".
func KubernetesRelease(version string) (string, error) {
	switch version {
	case "newest":
		return KubernetesVersion, nil
	case "oldest":
		return OldestKubernetesVersion, nil
	}
	for _, v := range KubernetesVersions {
		if version == v || strings.TrimPrefix(version, "v") == minorOf(v) {
			return v, nil
		}
	}
	return "", fmt.Errorf("no control plane of Kubernetes %q is built here (want one of %s)", version, strings.Join(KubernetesVersions, ", "))
}

// minorOf returns "1.33" for "v1.33.13": the version up to its second dot, without the "v".
func minorOf(version string) string {
	major, rest, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ := strings.Cut(rest, ".")
	return major + "." + minor
}

// kubernetesLDFlags stamp a control plane's version: without it the API server reports
// v0.0.0-master, which kubectl and helm refuse to parse.
func kubernetesLDFlags(version string) string {
	major, minor, _ := strings.Cut(minorOf(version), ".")
	return "-s -w -X k8s.io/component-base/version.gitVersion=" + version +
		" -X k8s.io/component-base/version.gitMajor=" + major + " -X k8s.io/component-base/version.gitMinor=" + minor +
		" -X k8s.io/component-base/version.gitTreeState=clean"
}

// ControlPlaneComponents are the components built once per Kubernetes version and named by
// ControlPlaneBinary; etcd, kwok and the node's binaries are built once, from tools/kube.
var ControlPlaneComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// controlPlaneSet is the control plane of version, named by ControlPlaneBinary.
func controlPlaneSet(version string) map[string]string {
	set := map[string]string{}
	for _, c := range ControlPlaneComponents {
		set[ControlPlaneBinary(c, version)] = "k8s.io/kubernetes/cmd/" + c
	}
	return set
}

// toolModule is one module under tools/ and the binaries built from it.
type toolModule struct {
	dir     string // folder under tools/
	ldflags string // stamped into every binary of the module
	// sets are the module's binaries in the groups they are built and cached in: asking for one
	// binary builds its whole set (the control plane runs as a whole), and a set is built on its
	// own when only it is needed, so the demo does not wait for kubelet. The sets of a module that
	// are missing are built by one `go build`, which compiles the packages they share once and
	// links the binaries in parallel.
	sets []outputSet
	// ownCode marks a module with Go code of its own rather than only version pins: its .go files
	// are then part of the cache key, so editing them rebuilds the binaries.
	ownCode bool
	// files are folders of a required module copied next to the binaries at build time, for data
	// that must match the built version exactly (cert-manager's CRDs): name -> where to copy from.
	// They come with every set of the module.
	files map[string]moduleFolder
	// kubernetesVersionIn are packages whose k8sVersionMajor and k8sVersionMinor variables are
	// stamped with the Kubernetes version of the k8s.io/client-go the module builds with, as
	// helm's release Makefile does: helm reports that version where no cluster is asked
	// (helm template, helm lint), and checks charts' kubeVersion against it.
	kubernetesVersionIn []string
	// onlyNamed marks a module built only when one of its binaries is named, never as part of
	// every tool (`testbin --set all`, Ensure with no names): no test runs it, and its build is
	// minutes that `make test` would pay for nothing.
	onlyNamed bool
}

// outputSet is a group of binaries of one module that are built and cached together.
type outputSet struct {
	name    string            // in progress lines and the build times file
	outputs map[string]string // binary name -> package path
}

// moduleFolder is a folder inside a module that the tools module requires.
type moduleFolder struct {
	module string // module path, resolved to the version the tools module's go.mod pins
	dir    string // folder inside the module
}

var toolModules = []toolModule{
	{
		dir:     "kube",
		ldflags: kubernetesLDFlags(KubernetesVersion),
		sets: []outputSet{
			// etcd comes with the newest control plane and serves every supported one.
			{name: "control plane", outputs: withEtcd(controlPlaneSet(KubernetesVersion))},
			// kwok fakes the nodes. Its client-go, apimachinery and api are the control plane's:
			// built with it, they are compiled once (2,688 packages for both, not 3,502).
			{name: "kwok", outputs: map[string]string{"kwok": "sigs.k8s.io/kwok/cmd/kwok"}},
			// kubelet and kube-proxy for a real node (REAL_NODE=1).
			{name: "node", outputs: map[string]string{
				"kubelet":    "k8s.io/kubernetes/cmd/kubelet",
				"kube-proxy": "k8s.io/kubernetes/cmd/kube-proxy",
			}},
		},
	},
	{
		// The oldest supported control plane, for the version suites; etcd and kwok are tools/kube's.
		dir:     "kube-1.33",
		ldflags: kubernetesLDFlags(OldestKubernetesVersion),
		sets:    []outputSet{{name: "control plane " + minorOf(OldestKubernetesVersion), outputs: controlPlaneSet(OldestKubernetesVersion)}},
	},
	{
		dir:                 "helm",
		ldflags:             "-s -w -X helm.sh/helm/v3/internal/version.version=v3.22.0",
		sets:                []outputSet{{name: "helm", outputs: map[string]string{"helm": "helm.sh/helm/v3/cmd/helm"}}},
		kubernetesVersionIn: []string{"helm.sh/helm/v3/pkg/chartutil", "helm.sh/helm/v3/pkg/lint/rules"},
	},
	{
		// ko builds the release image without a container engine (`make image`, internal/release).
		dir:     "ko",
		ldflags: "-s -w -X github.com/google/ko/pkg/commands.Version=v0.19.1",
		sets:    []outputSet{{name: "ko", outputs: map[string]string{"ko": "github.com/google/ko"}}},
	},
	{
		// gotestsum runs `make test`: the same verbose output, ending with each failed test and
		// what it printed, so the end of a long CI log says what failed.
		dir:     "gotestsum",
		ldflags: "-s -w",
		sets:    []outputSet{{name: "gotestsum", outputs: map[string]string{"gotestsum": "gotest.tools/gotestsum"}}},
	},
	{
		// cert-manager's controllers and cainjector in one process (see tools/certmanager), and
		// the CRDs of exactly that version.
		dir:     "certmanager",
		ldflags: "-s -w",
		sets: []outputSet{{name: "cert-manager", outputs: map[string]string{
			"cert-manager": "github.com/daemonguard/daemonguard/tools/certmanager/cmd/cert-manager",
		}}},
		ownCode: true,
		files:   map[string]moduleFolder{CertManagerCRDs: {module: "github.com/cert-manager/cert-manager", dir: "deploy/crds"}},
	},
	{
		// Argo CD's application controller, repo server and ApplicationSet controller in one binary
		// (see tools/argocd), and the CRDs of exactly that version.
		dir:     "argocd",
		ldflags: "-s -w",
		sets: []outputSet{{name: "Argo CD", outputs: map[string]string{
			ArgoCDBinary: "github.com/daemonguard/daemonguard/tools/argocd/cmd/argocd",
		}}},
		ownCode: true,
		files:   map[string]moduleFolder{ArgoCDCRDs: {module: "github.com/argoproj/argo-cd/v3", dir: "manifests/crds"}},
	},
	{
		// Gatekeeper, the peer the admission benchmark measures against (test/peerbench, `make
		// bench-peers`), and its release manifest (the CRDs it needs) of exactly that version.
		dir:       "gatekeeper",
		ldflags:   "-s -w",
		sets:      []outputSet{{name: "Gatekeeper", outputs: map[string]string{GatekeeperBinary: "github.com/open-policy-agent/gatekeeper/v3"}}},
		files:     map[string]moduleFolder{GatekeeperManifests: {module: "github.com/open-policy-agent/gatekeeper/v3", dir: "deploy"}},
		onlyNamed: true,
	},
}

// withEtcd adds etcd to the newest control plane's set: its version follows tools/kube's
// Kubernetes, and every cluster runs it, whichever control plane it starts.
func withEtcd(set map[string]string) map[string]string {
	set["etcd"] = "go.etcd.io/etcd/server/v3"
	return set
}

// ArgoCDBinary names the binary of Argo CD's application controller, repo server and
// ApplicationSet controller.
const ArgoCDBinary = "argocd"

// ArgoCDCRDs names the folder of Argo CD's CRDs built with the argocd binary.
const ArgoCDCRDs = "argocd-crds"

// GatekeeperBinary names the binary of Gatekeeper, built only for the peer benchmark.
const GatekeeperBinary = "gatekeeper"

// GatekeeperManifests names the folder of Gatekeeper's release manifests (deploy/, whose
// gatekeeper.yaml holds its CRDs) built with the gatekeeper binary.
const GatekeeperManifests = "gatekeeper-deploy"

// CertManagerCRDs names the folder of cert-manager's CRDs built with the cert-manager binary;
// Binaries.Path(CertManagerCRDs) locates it.
const CertManagerCRDs = "cert-manager-crds"
