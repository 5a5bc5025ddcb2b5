package promtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// ListenHost moves Prometheus off 127.0.0.1: it answers at the address asked for.
func TestListenHost(t *testing.T) {
	s := Start(t, Options{ListenHost: "127.0.0.2"})
	if !strings.HasPrefix(s.Address(), "http://127.0.0.2:") {
		t.Errorf("Address() = %s, want the ListenHost 127.0.0.2", s.Address())
	}
	if _, err := s.Query(t.Context(), "up"); err != nil {
		t.Errorf("Prometheus at %s: %v", s.Address(), err)
	}
}

// A pod job reaches Prometheus as the kubernetes_sd_configs job it describes (Prometheus reports
// the configuration it loaded, defaults filled in). Discovery itself needs a cluster:
// test/e2e/realnode scrapes real pods with it.
func TestPodJob(t *testing.T) {
	binary := KubernetesSDBinary(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	// No API server listens there: Prometheus loads the job and retries its watch.
	const unreachable = "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
	if err := os.WriteFile(kubeconfig, []byte(unreachable), 0o600); err != nil {
		t.Fatal(err)
	}
	relabel := []RelabelConfig{
		{SourceLabels: []string{"__meta_kubernetes_pod_label_app"}, Regex: "agent", Action: "keep"},
		{SourceLabels: []string{"__meta_kubernetes_pod_label_controller_revision_hash"}, TargetLabel: "revision"},
	}
	s := Start(t, Options{Binary: binary, PodJobs: []PodJob{{Job: "agents", KubeconfigFile: kubeconfig, Namespaces: []string{"ns1"}, RelabelConfigs: relabel}}})
	loaded, err := s.API().Config(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var config struct {
		ScrapeConfigs []struct {
			JobName             string `json:"job_name"`
			MetricsPath         string `json:"metrics_path"`
			KubernetesSDConfigs []struct {
				Role           string `json:"role"`
				KubeconfigFile string `json:"kubeconfig_file"`
				Namespaces     struct {
					Names []string `json:"names"`
				} `json:"namespaces"`
			} `json:"kubernetes_sd_configs"`
			RelabelConfigs []struct {
				SourceLabels []string `json:"source_labels"`
				Regex        string   `json:"regex"`
				TargetLabel  string   `json:"target_label"`
				Replacement  string   `json:"replacement"`
				Action       string   `json:"action"`
			} `json:"relabel_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(loaded.YAML), &config); err != nil {
		t.Fatalf("Prometheus' loaded configuration: %v\n%s", err, loaded.YAML)
	}
	if len(config.ScrapeConfigs) != 1 {
		t.Fatalf("%d scrape configs loaded, want the pod job:\n%s", len(config.ScrapeConfigs), loaded.YAML)
	}
	job := config.ScrapeConfigs[0]
	if job.JobName != "agents" || job.MetricsPath != "/metrics" || len(job.KubernetesSDConfigs) != 1 {
		t.Fatalf("loaded %+v, want job agents scraping /metrics of pods it discovers:\n%s", job, loaded.YAML)
	}
	if sd := job.KubernetesSDConfigs[0]; sd.Role != "pod" || sd.KubeconfigFile != kubeconfig || strings.Join(sd.Namespaces.Names, ",") != "ns1" {
		t.Errorf("loaded discovery %+v, want role pod in ns1 through %s", sd, kubeconfig)
	}
	if r := job.RelabelConfigs; len(r) != 2 || r[0].Action != "keep" || r[0].Regex != "agent" ||
		r[1].Action != "replace" || r[1].TargetLabel != "revision" || r[1].Replacement != "$1" {
		t.Errorf("loaded relabel_configs %+v, want keep app=agent, then the revision hash copied to revision with Prometheus' defaults", r)
	}
}
