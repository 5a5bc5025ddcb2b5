package toolbin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
