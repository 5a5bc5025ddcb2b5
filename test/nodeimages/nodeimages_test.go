package nodeimages

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
)

// imageDir holds the images Build made for this test binary, shared by the tests.
var imageDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nodeimages-")
	if err != nil {
		panic(err)
	}
	imageDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func build(t *testing.T) []Image {
	t.Helper()
	images, err := Build(context.Background(), imageDir)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return images
}

// archived is an archive read back: its index and the image its entries name.
type archived struct {
	index v1.IndexManifest
	image v1.Image
}

func readArchive(t *testing.T, path string) archived {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		target := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is no OCI layout: %v", path, err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) == 0 {
		t.Fatalf("%s lists no image", path)
	}
	for _, m := range manifest.Manifests[1:] {
		if m.Digest != manifest.Manifests[0].Digest {
			t.Fatalf("%s lists different images: %v", path, manifest.Manifests)
		}
	}
	img, err := layout.Path(dir).Image(manifest.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return archived{index: *manifest, image: img}
}

// names are the io.containerd.image.name annotations of the index entries.
func (a archived) names() []string {
	var names []string
	for _, m := range a.index.Manifests {
		names = append(names, m.Annotations[annotationImageName])
	}
	return names
}

// file returns the content and mode of path in the image's file system.
func (a archived) file(t *testing.T, path string) ([]byte, int64) {
	t.Helper()
	rc := mutate.Extract(a.image)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("image has no %s: %v", path, err)
		}
		if "/"+strings.TrimPrefix(hdr.Name, "./") == path {
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return data, hdr.Mode
		}
	}
}

func TestBuildMakesTheFourImages(t *testing.T) {
	images := build(t)
	var refs []string
	digests := map[string]v1.Hash{}
	for _, img := range images {
		refs = append(refs, img.Ref)
		a := readArchive(t, img.Tarball)
		digest, err := a.image.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[img.Ref] = digest
		repo, _, _ := strings.Cut(img.Ref, ":")
		if want := []string{img.Ref, repo + "@" + digest.String()}; !slices.Equal(a.names(), want) {
			t.Errorf("%s: archive names %v, want %v", img.Ref, a.names(), want)
		}
		cfg, err := a.image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		program := "nodeagent"
		if img.Ref == PauseRef {
			program = "pause"
		}
		if cfg.OS != "linux" || cfg.Architecture != "amd64" {
			t.Errorf("%s: platform %s/%s, want linux/amd64", img.Ref, cfg.OS, cfg.Architecture)
		}
		if cfg.Config.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532", img.Ref, cfg.Config.User)
		}
		if want := []string{"/" + program}; !slices.Equal(cfg.Config.Entrypoint, want) {
			t.Errorf("%s: entrypoint %q, want %q", img.Ref, cfg.Config.Entrypoint, want)
		}
		for _, label := range []string{"org.opencontainers.image.title", "org.opencontainers.image.description", "org.opencontainers.image.version", "org.opencontainers.image.source"} {
			if cfg.Config.Labels[label] == "" {
				t.Errorf("%s: no label %s in %v", img.Ref, label, cfg.Config.Labels)
			}
		}
		binary, mode := a.file(t, "/"+program)
		if mode&0o111 == 0 {
			t.Errorf("%s: /%s has mode %o, not executable", img.Ref, program, mode)
		}
		assertStaticLinuxBinary(t, img.Ref, binary)
	}
	if want := []string{PauseRef, AgentV1, AgentV2, AgentCrash}; !slices.Equal(refs, want) {
		t.Fatalf("Build made %v, want %v", refs, want)
	}
	if digests[AgentV1] == digests[AgentV2] || digests[AgentV2] == digests[AgentCrash] {
		t.Errorf("the agent images share digests: %v", digests)
	}
	wantEnv := map[string][]string{
		AgentV1:    {"NODE_AGENT_VERSION=v1"},
		AgentV2:    {"NODE_AGENT_VERSION=v2"},
		AgentCrash: {"NODE_AGENT_VERSION=crash", "NODE_AGENT_CRASH_AFTER=1s"},
	}
	for _, img := range images[1:] {
		cfg, err := readArchive(t, img.Tarball).image.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(cfg.Config.Env, wantEnv[img.Ref]) {
			t.Errorf("%s: env %q, want %q", img.Ref, cfg.Config.Env, wantEnv[img.Ref])
		}
	}
}

func assertStaticLinuxBinary(t *testing.T, ref string, data []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("%s: the binary is no ELF file: %v", ref, err)
		return
	}
	if f.Machine != elf.EM_X86_64 {
		t.Errorf("%s: the binary is for %s, want x86-64", ref, f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: the binary is dynamically linked (it names an interpreter)", ref)
		}
	}
}

func TestBuildReusesArchivesWhoseInputsDidNotChange(t *testing.T) {
	first := build(t)
	before := map[string]os.FileInfo{}
	for _, img := range first {
		fi, err := os.Stat(img.Tarball)
		if err != nil {
			t.Fatal(err)
		}
		before[img.Tarball] = fi
	}
	second := build(t)
	if !slices.Equal(first, second) {
		t.Fatalf("second Build returned %v, first %v", second, first)
	}
	for _, img := range second {
		fi, err := os.Stat(img.Tarball)
		if err != nil {
			t.Fatal(err)
		}
		if !os.SameFile(fi, before[img.Tarball]) || !fi.ModTime().Equal(before[img.Tarball].ModTime()) {
			t.Errorf("%s: the second Build rewrote %s", img.Ref, img.Tarball)
		}
	}
}

func TestImageKeyFollowsEveryInput(t *testing.T) {
	base := specs[1]
	baseKey, err := imageKey("sources", base)
	if err != nil {
		t.Fatal(err)
	}
	changed := map[string]struct {
		sources string
		spec    func(s spec) spec
	}{
		"a source file changed": {sources: "other sources", spec: func(s spec) spec { return s }},
		"the environment changed": {sources: "sources", spec: func(s spec) spec {
			s.env = []string{"NODE_AGENT_VERSION=v9"}
			return s
		}},
		"a label changed": {sources: "sources", spec: func(s spec) spec {
			s.description = "other"
			return s
		}},
		"the program changed": {sources: "sources", spec: func(s spec) spec {
			s.program = "pause"
			return s
		}},
	}
	for name, tc := range changed {
		t.Run(name, func(t *testing.T) {
			key, err := imageKey(tc.sources, tc.spec(base))
			if err != nil {
				t.Fatal(err)
			}
			if key == baseKey {
				t.Errorf("key %s did not change", key)
			}
		})
	}
	again, err := imageKey("sources", base)
	if err != nil || again != baseKey {
		t.Errorf("the same inputs gave key %s (%v), then %s", baseKey, err, again)
	}
}

func TestSourceKey(t *testing.T) {
	src := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, path), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nodeimages.go", "package nodeimages\n\nimport _ \"github.com/google/go-containerregistry/pkg/v1\"\n")
	write("pause/main.go", "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(0) }\n")
	first, err := sourceKey(src)
	if err != nil {
		t.Fatalf("sourceKey: %v", err)
	}

	write("pause/main_test.go", "package main\n")
	if key, err := sourceKey(src); err != nil || key != first {
		t.Errorf("a test file changed the key from %s to %s (%v)", first, key, err)
	}
	write("pause/main.go", "package main\n\nimport \"os\"\n\nfunc main() { os.Exit(1) }\n")
	if key, err := sourceKey(src); err != nil || key == first {
		t.Errorf("editing a program left the key at %s (%v)", key, err)
	}
	write("pause/main.go", "package main\n\nimport \"example.com/dep\"\n\nfunc main() { dep.Run() }\n")
	if _, err := sourceKey(src); err == nil || !strings.Contains(err.Error(), "example.com/dep") {
		t.Errorf("a program importing a module gave %v, want an error naming the import", err)
	}
}

func TestImportNames(t *testing.T) {
	digest := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	other := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("cd", 32)}
	tests := map[string]struct {
		ref     string
		want    []string // nil when an error is expected
		wantErr string   // a part of the error
	}{
		"a tag gives the tag and the digest": {
			ref:  "ghcr.io/daemonguard/daemonguard:v0.3.0",
			want: []string{"ghcr.io/daemonguard/daemonguard:v0.3.0", "ghcr.io/daemonguard/daemonguard@" + digest.String()},
		},
		"a tag and the image's digest keep both": {
			ref:  "127.0.0.1:5000/daemonguard:dev@" + digest.String(),
			want: []string{"127.0.0.1:5000/daemonguard:dev", "127.0.0.1:5000/daemonguard@" + digest.String()},
		},
		"a digest alone gives no tag": {
			ref:  "daemonguard.test/app@" + digest.String(),
			want: []string{"daemonguard.test/app@" + digest.String()},
		},
		"no tag means latest": {
			ref:  "daemonguard.test/app",
			want: []string{"daemonguard.test/app:latest", "daemonguard.test/app@" + digest.String()},
		},
		"Docker Hub names are normalized as containerd does": {
			ref:  "busybox:1",
			want: []string{"docker.io/library/busybox:1", "docker.io/library/busybox@" + digest.String()},
		},
		"another image's digest is refused": {
			ref:     "daemonguard.test/app:v1@" + other.String(),
			wantErr: "pins " + other.String(),
		},
		"an invalid name is refused": {
			ref:     "Not A Name",
			wantErr: "image reference",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := importNames(tc.ref, digest)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("importNames(%q) = %v, %v; want an error containing %q", tc.ref, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("importNames(%q) = %v, %v; want %v", tc.ref, got, err, tc.want)
			}
		})
	}
}

// writeLayout writes images into a new OCI image layout as ko does: an index listing each image.
func writeLayout(t *testing.T, images ...v1.Image) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range images {
		if err := p.AppendImage(img); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func randomImage(t *testing.T) (v1.Image, v1.Hash) {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return img, digest
}

func TestFromLayout(t *testing.T) {
	img, digest := randomImage(t)
	otherImg, otherDigest := randomImage(t)
	one := writeLayout(t, img)
	two := writeLayout(t, img, otherImg)
	repo := "127.0.0.1:5000/daemonguard"
	tests := map[string]struct {
		layout    string
		ref       string
		wantNames []string // the archive's names; nil when an error is expected
		want      v1.Hash  // the image the archive holds
		wantErr   string
	}{
		"the only image, by tag": {
			layout: one, ref: repo + ":v1",
			wantNames: []string{repo + ":v1", repo + "@" + digest.String()}, want: digest,
		},
		"the image make image recorded, by tag and digest": {
			layout: two, ref: repo + ":v1@" + otherDigest.String(),
			wantNames: []string{repo + ":v1", repo + "@" + otherDigest.String()}, want: otherDigest,
		},
		"a layout of two images needs a digest": {
			layout: two, ref: repo + ":v1", wantErr: "holds 2 single-platform images",
		},
		"a digest the layout lacks": {
			layout: one, ref: repo + ":v1@" + otherDigest.String(), wantErr: "holds no image " + otherDigest.String(),
		},
		"no layout": {
			layout: filepath.Join(t.TempDir(), "missing"), ref: repo + ":v1", wantErr: "open the OCI layout",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "image.tar")
			got, err := FromLayout(tc.layout, tc.ref, out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("FromLayout = %v, %v; want an error containing %q", got, err, tc.wantErr)
				}
				if _, statErr := os.Stat(out); statErr == nil {
					t.Errorf("a failed FromLayout left %s", out)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromLayout: %v", err)
			}
			if got != (Image{Ref: tc.ref, Tarball: out}) {
				t.Errorf("FromLayout = %+v", got)
			}
			a := readArchive(t, out)
			if !slices.Equal(a.names(), tc.wantNames) {
				t.Errorf("archive names %v, want %v", a.names(), tc.wantNames)
			}
			for _, m := range a.index.Manifests {
				if m.Platform == nil || m.Platform.String() != "linux/amd64" {
					t.Errorf("index entry %v has platform %v, want linux/amd64", m.Annotations, m.Platform)
				}
			}
			if d, err := a.image.Digest(); err != nil || d != tc.want {
				t.Errorf("archive holds %s (%v), want %s", d, err, tc.want)
			}
			// The layers survive byte for byte: the archive's image is the layout's.
			want, err := layout.Path(tc.layout).Image(tc.want)
			if err != nil {
				t.Fatal(err)
			}
			assertSameLayers(t, a.image, want)
		})
	}
}

func assertSameLayers(t *testing.T, got, want v1.Image) {
	t.Helper()
	gl, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := want.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(gl) != len(wl) {
		t.Fatalf("%d layers, want %d", len(gl), len(wl))
	}
	for i := range gl {
		g := readAll(t, gl[i])
		w := readAll(t, wl[i])
		if !bytes.Equal(g, w) {
			t.Errorf("layer %d differs", i)
		}
	}
}

func readAll(t *testing.T, l v1.Layer) []byte {
	t.Helper()
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
