package localcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// CertManager is cert-manager running as a component of a Cluster: the CRDs of the version
// pinned in tools/certmanager/go.mod, and cert-manager's own controllers for the Certificate issuing
// path (selfSigned and CA issuers, the CertificateRequest approver) plus its cainjector, in one
// child process built from tools/certmanager. cert-manager's webhook does not run: its CRDs'
// OpenAPI schemas validate what is applied, its extra semantic checks do not.
type CertManager struct {
	c        *Cluster
	p        *process
	stopOnce sync.Once
}

// certManagers holds the cert-manager running on each cluster: tests of a package share their
// cluster, and two cert-managers on one cluster would issue every Certificate twice.
var certManagers = struct {
	sync.Mutex
	running map[*Cluster]*CertManager
}{running: map[*Cluster]*CertManager{}}

const (
	certManagerName         = "cert-manager"
	certManagerFieldManager = "daemonguard-localcluster"
	certManagerReadyTimeout = 2 * time.Minute
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// StartCertManager installs cert-manager's CRDs (and waits until they are Established and served),
// starts cert-manager's controllers and cainjector against the cluster and waits until their
// informers have synced. Its log is Dir/logs/cert-manager.log; it dies with the process that owns
// the cluster and is stopped by Cluster.Stop. While one runs, StartCertManager returns it.
// A cold build of the binary (a few minutes) happens here unless `make testbin` ran before.
func (c *Cluster) StartCertManager(ctx context.Context) (*CertManager, error) {
	certManagers.Lock()
	defer certManagers.Unlock()
	if m := certManagers.running[c]; m != nil {
		return m, nil
	}
	bins, err := toolbin.Ensure(ctx, c.log, certManagerName, toolbin.CertManagerCRDs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, certManagerReadyTimeout)
	defer cancel()
	if err := c.installCRDs(ctx, bins.Path(toolbin.CertManagerCRDs)); err != nil {
		return nil, fmt.Errorf("install cert-manager CRDs: %w", err)
	}

	readyFile := filepath.Join(c.Dir, certManagerName+".ready")
	if err := os.Remove(readyFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	p, err := startProcess(certManagerName, bins.Path(certManagerName), []string{
		"--kubeconfig=" + c.KubeconfigPath,
		"--ready-file=" + readyFile,
		"--v=2", // cert-manager's info level: one line per issuance step, for post-mortems
	}, filepath.Join(c.Dir, "logs"))
	if err != nil {
		return nil, err
	}
	if err := c.addProcess(p); err != nil {
		c.stopProcess(p)
		return nil, err
	}
	err = wait.PollUntilContextCancel(ctx, pollInterval, true, func(context.Context) (bool, error) {
		if err := p.exitedErr(); err != nil {
			return false, err
		}
		_, err := os.Stat(readyFile)
		return err == nil, nil
	})
	if err != nil {
		c.stopProcess(p)
		return nil, fmt.Errorf("wait for cert-manager to sync its informers (log: %s): %w", p.logPath, err)
	}
	m := &CertManager{c: c, p: p}
	certManagers.running[c] = m
	fmt.Fprintf(c.log, "cert-manager controllers and cainjector ready (log: %s)\n", p.logPath)
	return m, nil
}

// Stop terminates cert-manager; its CRDs and the objects it made stay. Safe to call more than once.
func (m *CertManager) Stop() {
	m.stopOnce.Do(func() {
		certManagers.Lock()
		if certManagers.running[m.c] == m {
			delete(certManagers.running, m.c)
		}
		certManagers.Unlock()
		m.c.stopProcess(m.p)
	})
}

// LogPath is where cert-manager's output goes.
func (m *CertManager) LogPath() string { return m.p.logPath }

// addProcess makes p a component of the cluster: Healthy watches it, Stop stops it, and Reap
// (make demo-down) finds it in the pids file.
func (c *Cluster) addProcess(p *process) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = append(c.procs, p)
	return writePIDs(c.Dir, c.procs)
}

// stopProcess stops a component started by addProcess and forgets it.
func (c *Cluster) stopProcess(p *process) {
	p.stop(5 * time.Second)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.procs = slices.DeleteFunc(c.procs, func(q *process) bool { return q == p })
	_ = writePIDs(c.Dir, c.procs)
}

// installCRDs server-side applies every CustomResourceDefinition in the YAML files of dir and waits
// until each is Established and its resources are in discovery, where cert-manager looks them up.
func (c *Cluster) installCRDs(ctx context.Context, dir string) error {
	dyn, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		return err
	}
	crds, err := readCRDs(dir)
	if err != nil {
		return err
	}
	for _, crd := range crds {
		_, err := dyn.Resource(crdResource).Apply(ctx, crd.GetName(), crd,
			metav1.ApplyOptions{FieldManager: certManagerFieldManager, Force: true})
		if err != nil {
			return fmt.Errorf("apply CRD %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		if err := c.waitCRDServed(ctx, dyn, crd); err != nil {
			return err
		}
	}
	return nil
}

// readCRDs decodes the CustomResourceDefinition documents of the .yaml files in dir.
func readCRDs(dir string) ([]*unstructured.Unstructured, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var crds []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj map[string]any
			if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				return nil, fmt.Errorf("decode %s: %w", f, err)
			}
			u := &unstructured.Unstructured{Object: obj}
			if u.GetKind() == "CustomResourceDefinition" {
				crds = append(crds, u)
			}
		}
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CustomResourceDefinition in %s", dir)
	}
	return crds, nil
}

func (c *Cluster) waitCRDServed(ctx context.Context, dyn dynamic.Interface, crd *unstructured.Unstructured) error {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var last string
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		got, err := dyn.Resource(crdResource).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if !crdEstablished(got) {
			last = "not Established"
			return false, nil
		}
		for _, v := range versions {
			name, _, _ := unstructured.NestedString(v.(map[string]any), "name")
			if served, _, _ := unstructured.NestedBool(v.(map[string]any), "served"); !served {
				continue
			}
			list, err := c.Client.Discovery().ServerResourcesForGroupVersion(group + "/" + name)
			if err != nil && !apierrors.IsNotFound(err) {
				last = err.Error()
				return false, nil
			}
			if list == nil || !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == plural }) {
				last = fmt.Sprintf("%s not yet in discovery of %s/%s", plural, group, name)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("wait for CRD %s: %w (last: %s)", crd.GetName(), err, last)
	}
	return nil
}

func crdEstablished(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
