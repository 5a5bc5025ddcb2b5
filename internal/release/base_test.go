package release

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

func TestLocalBase(t *testing.T) {
	img, err := LocalBase(DefaultPlatform)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || cfg.OS != "linux" || cfg.Architecture != "amd64" {
		t.Fatalf("config user %q, platform %s/%s; want 65532:65532 on linux/amd64", cfg.Config.User, cfg.OS, cfg.Architecture)
	}
	if layers, err := img.Layers(); err != nil || len(layers) != 0 {
		t.Fatalf("%d layers (%v), want none: nothing but the binary goes into the image", len(layers), err)
	}
	if !cfg.Created.IsZero() {
		t.Fatalf("created %v: a timestamp would change the digest on every machine", cfg.Created)
	}
	arm, err := LocalBase(v1.Platform{OS: "linux", Architecture: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	if a, b := digest(t, img), digest(t, arm); a == b {
		t.Fatalf("amd64 and arm64 bases share digest %s", a)
	}
}

func TestWriteLocalBase(t *testing.T) {
	cases := map[string]func(t *testing.T, dir string){
		"a missing layout is created":      func(t *testing.T, dir string) {},
		"an empty folder becomes a layout": func(t *testing.T, dir string) { mkdir(t, dir) },
		"images already in the layout stay": func(t *testing.T, dir string) {
			p, err := layout.Write(dir, empty.Index)
			if err != nil {
				t.Fatal(err)
			}
			other, err := random.Image(64, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.AppendImage(other); err != nil {
				t.Fatal(err)
			}
		},
	}
	for sentence, setup := range cases {
		t.Run(sentence, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "img")
			setup(t, dir)
			before := manifests(t, dir)
			ref, err := WriteLocalBase(dir, DefaultPlatform)
			if err != nil {
				t.Fatal(err)
			}
			again, err := WriteLocalBase(dir, DefaultPlatform)
			if err != nil || again != ref {
				t.Fatalf("second write: %q, %v; want %q", again, err, ref)
			}
			d, err := name.NewDigest(ref)
			if err != nil {
				t.Fatalf("%q is no digest reference: %v", ref, err)
			}
			want, err := LocalBase(DefaultPlatform)
			if err != nil {
				t.Fatal(err)
			}
			if d.DigestStr() != digest(t, want) {
				t.Fatalf("reference %s, want the local base's digest %s", ref, digest(t, want))
			}
			p, err := layout.FromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			img, err := p.Image(v1.Hash{Algorithm: "sha256", Hex: strings.TrimPrefix(d.DigestStr(), "sha256:")})
			if err != nil {
				t.Fatalf("the layout lacks the base: %v", err)
			}
			if cfg, err := img.ConfigFile(); err != nil || cfg.Config.User != NonRootUser {
				t.Fatalf("base from the layout: %+v, %v", cfg, err)
			}
			if got := manifests(t, dir); got != before+1 {
				t.Fatalf("the layout holds %d images, want %d (the earlier ones and the base once)", got, before+1)
			}
		})
	}
}

func TestWriteLocalBaseOverAFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(path, []byte("not a layout"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteLocalBase(path, DefaultPlatform); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("WriteLocalBase over a file: %v, want an error naming %s", err, path)
	}
}

func digest(t *testing.T, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// manifests counts the images in the layout at dir, 0 when there is none yet.
func manifests(t *testing.T, dir string) int {
	t.Helper()
	p, err := layout.FromPath(dir)
	if err != nil {
		return 0
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return len(m.Manifests)
}

func TestResolveBase(t *testing.T) {
	local, err := LocalBase(DefaultPlatform)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		base, want, err string
	}{
		"local is the base written into ko's cache, named by digest": {
			base: BaseLocal, want: localBaseName + "@" + digest(t, local),
		},
		"an image reference is handed to ko as it is": {
			base: "registry.example.com/base/static@" + testDigest, want: "registry.example.com/base/static@" + testDigest,
		},
		"a malformed reference is refused": {
			base: "Registry.example.com/UPPER:tag", err: `base image "Registry.example.com/UPPER:tag"`,
		},
	}
	for sentence, c := range cases {
		t.Run(sentence, func(t *testing.T) {
			kocache := t.TempDir()
			got, err := resolveBase(t.Context(), ImageOptions{Base: c.base, KoCache: kocache, Platform: DefaultPlatform})
			if expectError(t, got, err, c.err) {
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("resolveBase(%q) = %q, %v; want %q", c.base, got, err, c.want)
			}
			if c.base == BaseLocal && manifests(t, filepath.Join(kocache, "img")) != 1 {
				t.Fatalf("the local base is not in %s/img, where ko looks for it", kocache)
			}
		})
	}
}
