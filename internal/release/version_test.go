package release

import (
	"strings"
	"testing"
)

func TestChartVersion(t *testing.T) {
	cases := map[string]struct {
		version, want, err string
	}{
		"a release tag loses its v":                           {version: "v1.2.3", want: "1.2.3"},
		"a commit after a tag keeps git describe's suffix":    {version: "v1.2.3-4-gabcdef0", want: "1.2.3-4-gabcdef0"},
		"a dirty tree after a tag stays marked dirty":         {version: "v1.2.3-4-gabcdef0-dirty", want: "1.2.3-4-gabcdef0-dirty"},
		"a bare commit becomes a pre-release of 0.0.0":        {version: "abcdef0", want: "0.0.0-git-abcdef0"},
		"an all-digit commit hash is still valid SemVer":      {version: "0123456", want: "0.0.0-git-0123456"},
		"a dirty bare commit stays marked dirty":              {version: "abcdef0-dirty", want: "0.0.0-git-abcdef0-dirty"},
		"an underscore, valid in a tag, becomes a hyphen":     {version: "dev_build", want: "0.0.0-git-dev-build"},
		"a short tag is no release version":                   {version: "v1.2", want: "0.0.0-git-v1.2"},
		"a part with a leading zero cannot be a chart":        {version: "v1.02", err: "no SemVer chart version"},
		"a version with a slash cannot tag the image":         {version: "feature/x", err: "cannot tag an image"},
		"an empty version is refused":                         {version: "", err: "cannot tag an image"},
		"a version starting with a hyphen cannot be a tag":    {version: "-x", err: "cannot tag an image"},
		"build metadata (+) cannot be in an image tag":        {version: "v1.2.3+meta", err: "cannot tag an image"},
		"a 129-character version is longer than a tag may be": {version: strings.Repeat("a", 129), err: "cannot tag an image"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ChartVersion(c.version)
			if expectError(t, got, err, c.err) {
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ChartVersion(%q) = %q, %v; want %q", c.version, got, err, c.want)
			}
		})
	}
}

func TestPlainHTTP(t *testing.T) {
	cases := map[string]struct {
		registry string
		want     bool
	}{
		"a loopback address with a port is plain HTTP":     {registry: "127.0.0.1:5000", want: true},
		"a path after a loopback registry is ignored":      {registry: "127.0.0.1:5000/team", want: true},
		"localhost with a port is plain HTTP":              {registry: "localhost:5000/team", want: true},
		"a public registry is HTTPS":                       {registry: "ghcr.io/daemonguard", want: false},
		"a registry with a port on a public name is HTTPS": {registry: "registry.example.com:5000/team", want: false},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := PlainHTTP(c.registry)
			if err != nil || got != c.want {
				t.Fatalf("PlainHTTP(%q) = %v, %v; want %v", c.registry, got, err, c.want)
			}
		})
	}
}

// expectError reports whether the case expects an error, want being a part of it, and fails t
// when err does not contain it; got is the result, shown on failure.
func expectError(t *testing.T, got any, err error, want string) bool {
	t.Helper()
	if want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Fatalf("got %q, error %v; want an error containing %q", got, err, want)
	}
	return want != ""
}
