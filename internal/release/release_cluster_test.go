package release_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/daemonguard/daemonguard/internal/release"
	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// testVersion has the shape of git describe's output some commits after a tag.
const testVersion = "v0.9.0-4-gabcdef0"

// TestReleasePath builds and pushes the image and the chart to a registry on loopback the way
// `make image chart REGISTRY=...` does, then installs the chart from that registry into the local
// cluster and runs the binary taken out of the pulled image.
func TestReleasePath(t *testing.T) {
	if cluster == nil {
		t.Skip("needs the local cluster (not started with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://") // 127.0.0.1:PORT

	root := toolbin.RepoPath(t)
	home := t.TempDir()
	helmEnv := append(cluster.Env(), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	var logs bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ko and helm output:\n%s", logs.String())
		}
	})
	o := release.Options{Repo: root, Version: testVersion, Registry: host, Base: release.BaseLocal,
		OutDir: t.TempDir(), HelmEnv: helmEnv, Log: &logs}

	start := time.Now()
	img, err := o.Image(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s built and pushed in %v", img.Ref, time.Since(start).Round(time.Second))
	chart, err := o.Chart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := "oci://" + host + "/charts/daemonguard"; chart.Ref != want || chart.Version != "0.9.0-4-gabcdef0" {
		t.Fatalf("chart pushed as %s version %s, want %s version 0.9.0-4-gabcdef0", chart.Ref, chart.Version, want)
	}
	pinned := host + "/daemonguard@" + img.Ref.DigestStr()

	t.Run("the pushed image runs as nonroot, without a shell, and its binary is the stamped build", func(t *testing.T) {
		checkImage(t, img, host)
	})
	t.Run("helm template from the registry pins the image by digest", func(t *testing.T) {
		out := helm(t, helmEnv, "template", "dg", chart.Ref, "--version", chart.Version, "--plain-http", "--namespace", "dg-system")
		images := deploymentImages(t, out)
		if len(images) != 2 {
			t.Fatalf("rendered Deployments %v, want the webhook and the controller", images)
		}
		for deployment, image := range images {
			if image != pinned {
				t.Errorf("Deployment %s runs %s, want %s", deployment, image, pinned)
			}
		}
	})
	t.Run("helm install from the registry runs the pinned image on the cluster", func(t *testing.T) {
		ns := "release-test"
		helm(t, helmEnv, "install", "dg", chart.Ref, "--version", chart.Version, "--plain-http",
			"--namespace", ns, "--create-namespace")
		t.Cleanup(func() { _, _ = helmErr(helmEnv, "uninstall", "dg", "--namespace", ns, "--wait") })
		deployments, err := cluster.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(deployments.Items) != 2 {
			t.Fatalf("%d Deployments installed, want the webhook and the controller", len(deployments.Items))
		}
		for _, d := range deployments.Items {
			for _, c := range d.Spec.Template.Spec.Containers {
				if c.Image != pinned {
					t.Errorf("Deployment %s container %s runs %s, want %s", d.Name, c.Name, c.Image, pinned)
				}
			}
		}
		// The Deployment controller and the scheduler make the pods; kwok's nodes report them.
		err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := cluster.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			scheduled := 0
			for _, p := range pods.Items {
				if p.Spec.NodeName != "" && p.Spec.Containers[0].Image == pinned {
					scheduled++
				}
			}
			return scheduled >= 2, nil
		})
		if err != nil {
			t.Fatalf("no scheduled pods running %s: %v", pinned, err)
		}
	})
}

// checkImage pulls the image from the registry and inspects its config, its files and its binary.
func checkImage(t *testing.T, img release.Image, host string) {
	tagged, err := name.NewTag(host + "/daemonguard:" + testVersion)
	if err != nil {
		t.Fatal(err)
	}
	if desc, err := remote.Head(tagged); err != nil || desc.Digest.String() != img.Ref.DigestStr() {
		t.Fatalf("tag %s: %v, %v; want digest %s", tagged, desc, err, img.Ref.DigestStr())
	}
	pulled, err := remote.Image(img.Ref)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (the chart's runAsUser)", cfg.Config.User)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != release.Entrypoint || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [%s] and no cmd (the chart passes the subcommand)", cfg.Config.Entrypoint, cfg.Config.Cmd, release.Entrypoint)
	}
	if cfg.OS+"/"+cfg.Architecture != "linux/amd64" {
		t.Errorf("platform %s/%s, want linux/amd64", cfg.OS, cfg.Architecture)
	}
	revision, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.title":    "daemonguard",
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.source":   "https://github.com/daemonguard/daemonguard",
		"org.opencontainers.image.revision": strings.TrimSpace(string(revision)),
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	binary := filepath.Join(t.TempDir(), "daemonguard")
	files := extract(t, pulled, strings.TrimPrefix(release.Entrypoint, "/"), binary)
	for _, f := range files {
		switch path.Base(f) {
		case "sh", "bash", "ash", "dash", "busybox":
			t.Errorf("the image holds a shell: %s", f)
		}
	}

	if runtime.GOOS+"/"+runtime.GOARCH != "linux/amd64" {
		t.Logf("not running the linux/amd64 binary on %s/%s", runtime.GOOS, runtime.GOARCH)
	} else {
		out, err := exec.Command(binary, "version").CombinedOutput()
		if err != nil || !strings.Contains(string(out), testVersion) {
			t.Errorf("daemonguard version: %v\n%s\nwant it to print %s", err, out, testVersion)
		}
		out, err = exec.Command(binary, "webhook", "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--failure-mode") {
			t.Errorf("daemonguard webhook --help: %v\n%s", err, out)
		}
	}

	var sbom struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name string `json:"name"`
		} `json:"packages"`
	}
	data, err := os.ReadFile(img.SBOM)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &sbom); err != nil || !strings.HasPrefix(sbom.SPDXVersion, "SPDX-2.") {
		t.Fatalf("SBOM %s: spdxVersion %q, %v; want an SPDX 2 document", img.SBOM, sbom.SPDXVersion, err)
	}
	var names []string
	for _, p := range sbom.Packages {
		names = append(names, p.Name)
	}
	for _, want := range []string{"github.com/daemonguard/daemonguard", "github.com/open-policy-agent/opa"} {
		if !strings.Contains(strings.Join(names, "\n"), want) {
			t.Errorf("the SBOM lists no %s among %d packages", want, len(names))
		}
	}
}

// extract reads the image's flattened filesystem, copies the file at want to dst (executable) and
// returns the names of every entry.
func extract(t *testing.T, img v1.Image, want, dst string) []string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		// ko writes absolute names ("/ko-app/daemonguard").
		file := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		names = append(names, file)
		if file != want {
			continue
		}
		if h.Typeflag != tar.TypeReg {
			t.Fatalf("%s in the image is not a regular file (type %c)", want, h.Typeflag)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o755); err != nil {
			t.Fatal(err)
		}
		found = true
	}
	if !found {
		t.Fatalf("the image has no %s among %q", want, names)
	}
	return names
}

// deploymentImages maps each Deployment in a rendered manifest to its only container's image.
func deploymentImages(t *testing.T, manifest string) map[string]string {
	t.Helper()
	images := map[string]string{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			return images
		} else if err != nil {
			t.Fatalf("decode the rendered chart: %v", err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		if len(d.Spec.Template.Spec.Containers) != 1 {
			t.Fatalf("Deployment %s has %d containers, want 1", d.Name, len(d.Spec.Template.Spec.Containers))
		}
		images[d.Name] = d.Spec.Template.Spec.Containers[0].Image
	}
}

func helm(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, err := helmErr(env, args...)
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func helmErr(env []string, args ...string) (string, error) {
	bins, err := toolbin.Ensure(context.Background(), io.Discard, "helm")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bins.Path("helm"), args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}
