package promtest

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// PodJob is a scrape job whose targets are a cluster's pods as Prometheus' kubernetes_sd_configs
// (role pod) finds them: one target per declared container port of each pod with an IP, at
// podIP:port, carrying the __meta_kubernetes_* labels that discovery gives, which RelabelConfigs
// keep, drop and copy into target labels exactly as in a cluster's Prometheus.
//
// Debian's prometheus is built without Kubernetes discovery, and building Prometheus with it
// costs minutes of a new machine's first `make test` (7.4 min measured here, on 2 cores). So
// promtest lists the pods itself, with the test's client, and serves them to Debian's Prometheus
// over HTTP service discovery (http_sd_configs, refreshed every second): the discovery is a
// stand-in, the relabelling and the scrapes are Prometheus' own.
type PodJob struct {
	// Job is the job label of its series; unique among the jobs and targets.
	Job string
	// Client lists the pods.
	Client kubernetes.Interface
	// Namespaces limits discovery to these namespaces; every namespace when empty.
	Namespaces []string
	// RelabelConfigs are the job's relabel_configs, applied in order to each discovered target.
	RelabelConfigs []RelabelConfig
	// MetricsPath is the path scraped on each target; /metrics when empty.
	MetricsPath string
}

// RelabelConfig is one rule of a job's relabel_configs, as Prometheus documents it. An empty
// field takes Prometheus' default (action replace, regex (.*), replacement $1).
type RelabelConfig struct {
	SourceLabels []string `json:"source_labels,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	TargetLabel  string   `json:"target_label,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// targetGroup is one entry of an HTTP service discovery answer.
type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// servePodDiscovery serves each pod job's targets over HTTP until the test ends, and returns the
// discovery URL of each job.
func servePodDiscovery(t testing.TB, jobs []PodJob) (map[string]string, error) {
	urls := map[string]string{}
	for _, job := range jobs {
		if job.Client == nil {
			return nil, fmt.Errorf("pod job %s: no client to list pods with", job.Job)
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			namespaces := job.Namespaces
			if len(namespaces) == 0 {
				namespaces = []string{metav1.NamespaceAll}
			}
			groups := []targetGroup{}
			for _, ns := range namespaces {
				pods, err := job.Client.CoreV1().Pods(ns).List(r.Context(), metav1.ListOptions{})
				if err != nil {
					// Prometheus keeps the last targets it discovered and asks again.
					http.Error(w, err.Error(), http.StatusServiceUnavailable)
					return
				}
				for i := range pods.Items {
					groups = append(groups, podTargets(&pods.Items[i])...)
				}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(groups)
		}))
		t.Cleanup(srv.Close)
		urls[job.Job] = srv.URL
	}
	return urls, nil
}

// invalidLabelChars are what Prometheus replaces with _ to make a label name of a Kubernetes one.
var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// podTargets are the targets Kubernetes discovery (role pod) makes of p: one per declared
// container port, with the pod's labels, annotations and the port's name and number; none
// without a pod IP.
func podTargets(p *corev1.Pod) []targetGroup {
	if p.Status.PodIP == "" {
		return nil
	}
	common := map[string]string{
		"__meta_kubernetes_namespace":     p.Namespace,
		"__meta_kubernetes_pod_name":      p.Name,
		"__meta_kubernetes_pod_ip":        p.Status.PodIP,
		"__meta_kubernetes_pod_node_name": p.Spec.NodeName,
		"__meta_kubernetes_pod_host_ip":   p.Status.HostIP,
		"__meta_kubernetes_pod_uid":       string(p.UID),
		"__meta_kubernetes_pod_phase":     string(p.Status.Phase),
		"__meta_kubernetes_pod_ready":     "false",
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			common["__meta_kubernetes_pod_ready"] = string(c.Status)
			if c.Status == corev1.ConditionTrue {
				common["__meta_kubernetes_pod_ready"] = "true"
			}
		}
	}
	if ref := metav1.GetControllerOf(p); ref != nil {
		common["__meta_kubernetes_pod_controller_kind"] = ref.Kind
		common["__meta_kubernetes_pod_controller_name"] = ref.Name
	}
	for k, v := range p.Labels {
		name := invalidLabelChars.ReplaceAllString(k, "_")
		common["__meta_kubernetes_pod_label_"+name] = v
		common["__meta_kubernetes_pod_labelpresent_"+name] = "true"
	}
	for k, v := range p.Annotations {
		name := invalidLabelChars.ReplaceAllString(k, "_")
		common["__meta_kubernetes_pod_annotation_"+name] = v
		common["__meta_kubernetes_pod_annotationpresent_"+name] = "true"
	}
	var out []targetGroup
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			labels := map[string]string{
				"__meta_kubernetes_pod_container_name":          c.Name,
				"__meta_kubernetes_pod_container_image":         c.Image,
				"__meta_kubernetes_pod_container_port_name":     port.Name,
				"__meta_kubernetes_pod_container_port_number":   strconv.Itoa(int(port.ContainerPort)),
				"__meta_kubernetes_pod_container_port_protocol": string(port.Protocol),
			}
			for k, v := range common {
				labels[k] = v
			}
			out = append(out, targetGroup{Targets: []string{net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))}, Labels: labels})
		}
	}
	return out
}

// podScrapeConfigs renders the pod jobs as scrape configs reading their targets from the
// discovery URLs sd; jobs holds the job names taken so far.
func podScrapeConfigs(podJobs []PodJob, sd map[string]string, jobs map[string]bool) ([]any, error) {
	type httpSDConfig struct {
		URL             string `json:"url"`
		RefreshInterval string `json:"refresh_interval"`
	}
	type scrapeConfig struct {
		JobName        string          `json:"job_name"`
		MetricsPath    string          `json:"metrics_path"`
		HTTPSDConfigs  []httpSDConfig  `json:"http_sd_configs"`
		RelabelConfigs []RelabelConfig `json:"relabel_configs,omitempty"`
	}
	var scrapes []any
	for _, job := range podJobs {
		if job.Job == "" || jobs[job.Job] {
			return nil, fmt.Errorf("pod job %q is empty or not unique", job.Job)
		}
		jobs[job.Job] = true
		path := job.MetricsPath
		if path == "" {
			path = "/metrics"
		}
		scrapes = append(scrapes, scrapeConfig{JobName: job.Job, MetricsPath: path,
			HTTPSDConfigs: []httpSDConfig{{URL: sd[job.Job], RefreshInterval: "1s"}}, RelabelConfigs: job.RelabelConfigs})
	}
	return scrapes, nil
}
