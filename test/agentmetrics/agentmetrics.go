// Package agentmetrics stands in for the node agents of a DaemonSet in the analysis tests: an
// exporter that serves, for every node, the series a node agent would report about itself, with a
// value chosen by the revision of the DaemonSet's pod on that node. It reads the pods from the API
// server at every scrape (or, after Watch, from an informer), so a real Prometheus sees a node's
// series change as the rollout replaces its pod, as it would with a real agent.
package agentmetrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// Metric is the series the exporter serves: one gauge per node, labelled with the node and the
// revision of the DaemonSet's pod on it, and with the DaemonSet's namespace, as a scrape
// configuration's relabelling labels a pod's series (a gate outside namespaces marked for node
// agents reads only the series of its own namespace).
const Metric = "agent_error_ratio"

// Exporter serves Metric for the nodes of one DaemonSet.
type Exporter struct {
	client          kubernetes.Interface
	namespace, name string
	desc            *prometheus.Desc

	// daemonSets and pods read from informers once Watch has started them; nil: from the API
	// server at every scrape.
	daemonSets appslisters.DaemonSetNamespaceLister
	pods       corelisters.PodNamespaceLister

	mu         sync.Mutex
	byRevision map[string]float64 // controller-revision-hash -> the value its pods report
	others     float64            // the value of the revisions not in byRevision
	noise      float64            // added on every node, whatever its revision
	dropped    map[string]bool    // nodes whose series are not served
}

// New is an exporter for the DaemonSet namespace/name; every revision reports 0 until Set or SetOthers.
func New(client kubernetes.Interface, namespace, name string) *Exporter {
	return &Exporter{client: client, namespace: namespace, name: name, byRevision: map[string]float64{}, dropped: map[string]bool{},
		desc: prometheus.NewDesc(Metric, "Share of records the node agent failed to handle (test exporter).", []string{"node", "revision"}, prometheus.Labels{"namespace": namespace})}
}

// Set makes the pods of revision report value.
func (e *Exporter) Set(revision string, value float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.byRevision[revision] = value
}

// SetOthers makes the pods of every revision not Set report value: a release not yet applied.
func (e *Exporter) SetOthers(value float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.others = value
}

// SetNoise adds value to every node's series: noise the whole cluster shares.
func (e *Exporter) SetNoise(value float64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.noise = value
}

// Drop stops (or, with false, resumes) serving node's series.
func (e *Exporter) Drop(node string, dropped bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropped[node] = dropped
}

// Watch makes the exporter read the DaemonSet and its pods from informers, started now and
// stopped when the test ends, instead of from the API server at every scrape. A benchmark on
// 1,000 nodes scraped every second would otherwise list 1,000 pods a second: work for the API
// server that real node agents, each serving its own series, never cause, and that would be
// counted against the rollout being measured. It returns once the informers have synced.
func (e *Exporter) Watch(t testing.TB) {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(e.namespace))
	daemonSets, pods := factory.Apps().V1().DaemonSets(), factory.Core().V1().Pods()
	dsInformer, podInformer := daemonSets.Informer(), pods.Informer()
	factory.Start(stop)
	if !cache.WaitForCacheSync(stop, dsInformer.HasSynced, podInformer.HasSynced) {
		t.Fatalf("agentmetrics: the informers of namespace %s did not sync", e.namespace)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.daemonSets, e.pods = daemonSets.Lister().DaemonSets(e.namespace), pods.Lister().Pods(e.namespace)
}

// Describe implements prometheus.Collector.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) { ch <- e.desc }

// Collect implements prometheus.Collector: one sample per node that runs a pod of the DaemonSet
// that is not terminating. A failed read serves nothing, as an agent that cannot be reached.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	ds, pods, err := e.read()
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range pods {
		owner := metav1.GetControllerOf(p)
		if owner == nil || owner.UID != ds.UID || p.DeletionTimestamp != nil || p.Spec.NodeName == "" || e.dropped[p.Spec.NodeName] {
			continue
		}
		rev := p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
		v, ok := e.byRevision[rev]
		if !ok {
			v = e.others
		}
		ch <- prometheus.MustNewConstMetric(e.desc, prometheus.GaugeValue, v+e.noise, p.Spec.NodeName, rev)
	}
}

// read returns the DaemonSet and the pods of its namespace, from the informers after Watch, else
// from the API server.
func (e *Exporter) read() (*appsv1.DaemonSet, []*corev1.Pod, error) {
	e.mu.Lock()
	daemonSets, podLister := e.daemonSets, e.pods
	e.mu.Unlock()
	if podLister != nil {
		ds, err := daemonSets.Get(e.name)
		if err != nil {
			return nil, nil, err
		}
		pods, err := podLister.List(labels.Everything())
		return ds, pods, err
	}
	ctx := context.Background()
	ds, err := e.client.AppsV1().DaemonSets(e.namespace).Get(ctx, e.name, metav1.GetOptions{})
	if err != nil {
		return nil, nil, err
	}
	list, err := e.client.CoreV1().Pods(e.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	return ds, pods, nil
}

// Serve serves the exporter's /metrics on a loopback port until the test ends, and returns the
// endpoint's URL for a scrape target.
func (e *Exporter) Serve(t testing.TB) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}
