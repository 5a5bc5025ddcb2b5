package toolbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

func TestKubernetesVersionOfClientGo(t *testing.T) {
	tests := map[string]struct {
		version      string
		major, minor int
		wantErr      bool
	}{
		"a release":             {version: "v0.37.0", major: 1, minor: 37},
		"a patch release":       {version: "v0.36.3", major: 1, minor: 36},
		"a pre-release":         {version: "v0.38.0-alpha.1", major: 1, minor: 38},
		"not required":          {version: "", wantErr: true},
		"not a v0 version":      {version: "v1.2.3", wantErr: true},
		"a pseudo-version of 0": {version: "v0.0.0-20240101000000-abcdef123456", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			major, minor, err := kubernetesVersionOfClientGo(tc.version)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (major != tc.major || minor != tc.minor) {
				t.Errorf("got %d.%d, want %d.%d", major, minor, tc.major, tc.minor)
			}
		})
	}
}

// The helm binary reports the Kubernetes version of the client-go it is built with, and is
// rebuilt when that changes.
func TestHelmIsStampedWithItsClientGoVersion(t *testing.T) {
	dir := t.TempDir()
	write := func(clientGo string) {
		gomod := "module x\n\nrequire (\n\thelm.sh/helm/v3 v3.22.0\n\tk8s.io/client-go " + clientGo + " // indirect\n)\n"
		for name, content := range map[string]string{"go.mod": gomod, "go.sum": ""} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	var helm toolModule
	for _, m := range toolModules {
		if m.dir == "helm" {
			helm = m
		}
	}
	write("v0.37.0")
	flags, err := helm.buildLDFlags(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37",
		"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37",
	} {
		if !strings.Contains(flags, want) {
			t.Errorf("ldflags %q lack %q", flags, want)
		}
	}
	before, err := moduleKey(dir, helm)
	if err != nil {
		t.Fatal(err)
	}
	unstamped := helm
	unstamped.kubernetesVersionIn = nil
	if k, _ := moduleKey(dir, unstamped); k == before {
		t.Error("the cache key is the same with and without the version stamp: cached unstamped binaries would be used")
	}
	write("v0.38.1")
	if k, _ := moduleKey(dir, helm); k == before {
		t.Error("the cache key did not change with client-go's version")
	}
	write("")
	if _, err := moduleKey(dir, helm); err == nil {
		t.Error("a go.mod without k8s.io/client-go gave a key")
	}
}

func TestInWords(t *testing.T) {
	tests := map[string][]string{
		"":                             nil,
		"control plane":                {"control plane"},
		"control plane and kwok":       {"control plane", "kwok"},
		"control plane, kwok and node": {"control plane", "kwok", "node"},
		"a, b, c and d":                {"a", "b", "c", "d"},
	}
	for want, names := range tests {
		if got := inWords(names); got != want {
			t.Errorf("inWords(%q) = %q, want %q", names, got, want)
		}
	}
}

func TestKubernetesRelease(t *testing.T) {
	for in, want := range map[string]string{
		"v1.37.2": KubernetesVersion, "1.37": KubernetesVersion, "newest": KubernetesVersion,
		"v1.33.13": OldestKubernetesVersion, "1.33": OldestKubernetesVersion, "v1.33": OldestKubernetesVersion, "oldest": OldestKubernetesVersion,
	} {
		if got, err := KubernetesRelease(in); err != nil || got != want {
			t.Errorf("KubernetesRelease(%q) = %q, %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"1.35", "v1.33.1", "1", "", "latest"} {
		if got, err := KubernetesRelease(in); err == nil {
			t.Errorf("KubernetesRelease(%q) = %q, want an error naming what is built", in, got)
		}
	}
	// The newest control plane keeps the components' own names; another carries its minor, so
	// both can sit in one binary cache.
	if got := ControlPlaneBinary("kube-apiserver", KubernetesVersion); got != "kube-apiserver" {
		t.Errorf("newest kube-apiserver is %q", got)
	}
	if got := ControlPlaneBinary("kube-apiserver", OldestKubernetesVersion); got != "kube-apiserver-1.33" {
		t.Errorf("oldest kube-apiserver is %q", got)
	}
	if got := kubernetesLDFlags("v1.33.13"); !strings.Contains(got, "gitVersion=v1.33.13") || !strings.Contains(got, "gitMajor=1 ") || !strings.Contains(got, "gitMinor=33 ") {
		t.Errorf("ldflags %q do not stamp v1.33.13", got)
	}
}

// TestToolsModulesPinTheVersions: each control plane's tools module requires the k8s.io/kubernetes
// its binaries are stamped with, and its staging modules at the same release.
func TestToolsModulesPinTheVersions(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for dir, version := range map[string]string{"kube": KubernetesVersion, "kube-1.33": OldestKubernetesVersion} {
		path := filepath.Join(root, "tools", dir, "go.mod")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := modfile.Parse(path, data, nil)
		if err != nil {
			t.Fatal(err)
		}
		staging := "v0." + strings.TrimPrefix(version, "v1.")
		found := false
		for _, r := range f.Require {
			if r.Mod.Path == "k8s.io/kubernetes" {
				found = r.Mod.Version == version
			}
		}
		if !found {
			t.Errorf("tools/%s does not require k8s.io/kubernetes %s", dir, version)
		}
		for _, r := range f.Replace {
			if strings.HasPrefix(r.Old.Path, "k8s.io/") && r.New.Version != staging {
				t.Errorf("tools/%s replaces %s with %s, want %s", dir, r.Old.Path, r.New.Version, staging)
			}
		}
	}
}

// PinnedVersion reads what a tools module requires, and says so when it requires nothing of the
// name.
func TestPinnedVersion(t *testing.T) {
	v, err := PinnedVersion("gatekeeper", "github.com/open-policy-agent/gatekeeper/v3")
	if err != nil || !strings.HasPrefix(v, "v3.") {
		t.Errorf("PinnedVersion of Gatekeeper = %q, %v; want a v3 release", v, err)
	}
	if _, err := PinnedVersion("helm", "example.com/none"); err == nil || !strings.Contains(err.Error(), "tools/helm requires no example.com/none") {
		t.Errorf("PinnedVersion of a module not required: %v, want an error naming it", err)
	}
	if _, err := PinnedVersion("no-such-tool", "example.com/none"); err == nil {
		t.Error("PinnedVersion of a missing tools module gave no error")
	}
}
