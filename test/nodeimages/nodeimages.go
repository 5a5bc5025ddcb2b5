// Package nodeimages builds the container images the local cluster's real node runs, without a
// container engine and without pulling anything: the sandbox (pause) image, and the node agent
// that DaemonSets in tests and the demo roll out, in two versions and a crash-looping one. Each
// image holds one static Go binary built from a main package beside this one (pause/,
// nodeagent/), runs as 65532:65532 and is written as an OCI archive that containerd imports
// (`ctr -n k8s.io images import --platform linux/amd64 FILE`). FromLayout turns the OCI image
// layout of `make image` into such an archive.
//
// Every archive names its image twice, by tag and by digest (repo@sha256:…), so an image
// referenced by digest is found after an import as after a pull: containerd's CRI resolves
// repo@sha256:… only through an image record of exactly that name, which an import creates only
// when the archive carries the name.
package nodeimages

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

// Image is a built image: the archive to import and the name it is imported under.
type Image struct {
	Ref     string // the image's name, as a pod spec or containerd's sandbox_image gives it
	Tarball string // an OCI archive that `ctr -n k8s.io images import --platform linux/amd64` accepts, naming Ref
}

// The images Build makes. The registry name is reserved (.test), so nothing ever tries to pull
// from it successfully: pods use imagePullPolicy Never or IfNotPresent.
const (
	// PauseRef is the sandbox image: it waits for SIGTERM or SIGINT and exits 0.
	PauseRef = "daemonguard.test/pause:1"
	// AgentV1 and AgentV2 are the node agent reporting version v1 and v2 on /version: the same
	// binary, with the version in the image's environment, so their digests differ.
	AgentV1 = "daemonguard.test/node-agent:v1"
	AgentV2 = "daemonguard.test/node-agent:v2"
	// AgentCrash is the node agent exiting 1 a second after start, so the kubelet puts it into
	// CrashLoopBackOff.
	AgentCrash = "daemonguard.test/node-agent:crash"
)

// NonRootUser is the user every image runs as: the chart's runAsUser, distroless's "nonroot".
const NonRootUser = "65532:65532"

// Platform is the one platform the images are built for.
var Platform = v1.Platform{OS: "linux", Architecture: "amd64"}

const sourceURL = "https://github.com/daemonguard/daemonguard"

// sourceDir is this package's folder in the checkout; the programs are in folders below it.
const sourceDir = "test/nodeimages"

// spec says how one image is made.
type spec struct {
	ref         string
	program     string   // folder beside this package holding the main package; also the binary's name in the image
	env         []string // the image's environment
	version     string   // the org.opencontainers.image.version label
	description string
}

var specs = []spec{
	{ref: PauseRef, program: "pause", version: "1",
		description: "Sandbox image for the local real node: waits for SIGTERM and exits 0"},
	{ref: AgentV1, program: "nodeagent", version: "v1", env: []string{"NODE_AGENT_VERSION=v1"},
		description: "Node agent for DaemonSet tests, version v1"},
	{ref: AgentV2, program: "nodeagent", version: "v2", env: []string{"NODE_AGENT_VERSION=v2"},
		description: "Node agent for DaemonSet tests, version v2"},
	{ref: AgentCrash, program: "nodeagent", version: "crash", env: []string{"NODE_AGENT_VERSION=crash", "NODE_AGENT_CRASH_AFTER=1s"},
		description: "Node agent for DaemonSet tests that exits 1 a second after start"},
}

// binaryPath is where an image holds its program, and its entrypoint.
func (s spec) binaryPath() string { return "/" + s.program }

// configFile is the image's config without its layer.
func (s spec) configFile() *v1.ConfigFile {
	return &v1.ConfigFile{
		OS:           Platform.OS,
		Architecture: Platform.Architecture,
		Config: v1.Config{
			Entrypoint: []string{s.binaryPath()},
			Env:        s.env,
			User:       NonRootUser,
			WorkingDir: "/",
			Labels: map[string]string{
				"org.opencontainers.image.title":       s.program,
				"org.opencontainers.image.description": s.description,
				"org.opencontainers.image.version":     s.version,
				"org.opencontainers.image.source":      sourceURL,
			},
		},
	}
}

// goBuildFlags build a static, reproducible binary: the same source and Go version give the
// same bytes on every machine, and so the same image digests.
var goBuildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// CacheDir is where tests keep the built images between runs, beside the test binaries of
// internal/toolbin: $DAEMONGUARD_IMAGE_CACHE, else the user cache dir's daemonguard/images.
func CacheDir() (string, error) {
	return toolbin.CacheDir("DAEMONGUARD_IMAGE_CACHE", "images", "node images")
}

// Build writes the archives of PauseRef, AgentV1, AgentV2 and AgentCrash into dir, in that
// order, and returns them. An archive's file name carries a key of everything it is made from
// (the Go files of this package and its programs, the Go version, the image's config), so an
// archive already in dir is reused as it is, and a change of any input builds a new one. Archives
// appear at once, complete (written aside, then renamed), so concurrent callers are safe: at
// worst both build the same archive.
func Build(ctx context.Context, dir string) ([]Image, error) {
	root, err := toolbin.RepoRoot()
	if err != nil {
		return nil, err
	}
	src := filepath.Join(root, filepath.FromSlash(sourceDir))
	sources, err := sourceKey(src)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create image dir: %w", err)
	}
	var work string // temporary folder for binaries, made on the first miss
	defer func() {
		if work != "" {
			_ = os.RemoveAll(work)
		}
	}()
	binaries := map[string]string{} // program -> built binary
	var out []Image
	for _, s := range specs {
		key, err := imageKey(sources, s)
		if err != nil {
			return nil, err
		}
		path := filepath.Join(dir, archiveName(s.ref, key))
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
			out = append(out, Image{Ref: s.ref, Tarball: path})
			continue
		}
		if work == "" {
			if work, err = os.MkdirTemp(dir, ".build-"); err != nil {
				return nil, fmt.Errorf("create build dir: %w", err)
			}
		}
		bin, ok := binaries[s.program]
		if !ok {
			bin = filepath.Join(work, s.program)
			if err := goBuild(ctx, root, "./"+sourceDir+"/"+s.program, bin); err != nil {
				return nil, err
			}
			binaries[s.program] = bin
		}
		img, err := s.image(bin)
		if err != nil {
			return nil, fmt.Errorf("make image %s: %w", s.ref, err)
		}
		if err := writeArchiveFile(path, img, s.ref); err != nil {
			return nil, fmt.Errorf("write image %s: %w", s.ref, err)
		}
		pruneStale(dir, s.ref, path)
		out = append(out, Image{Ref: s.ref, Tarball: path})
	}
	return out, nil
}

// image is s's image holding the binary at bin.
func (s spec) image(bin string) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	layerTar, err := singleFileTar(s.binaryPath(), data, 0o555)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img, err := mutate.ConfigFile(empty.Image, s.configFile())
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(mutate.MediaType(img, types.OCIManifestSchema1), types.OCIConfigJSON)
	return mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{CreatedBy: "nodeimages: " + s.binaryPath() + " built from " + sourceDir + "/" + s.program},
	})
}

// singleFileTar is a layer holding one file owned by root, with a fixed time so the layer's
// digest depends on the content alone.
func singleFileTar(path string, data []byte, mode int64) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     strings.TrimPrefix(path, "/"),
		Mode:     mode,
		Size:     int64(len(data)),
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// goBuild compiles the main package pkg of the checkout at root into a static linux/amd64
// binary at out.
func goBuild(ctx context.Context, root, pkg, out string) error {
	args := append(append([]string{"build"}, goBuildFlags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	// The environment's GOFLAGS (-race, say) and GOAMD64 would change the binary without changing
	// the cache key.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+Platform.OS, "GOARCH="+Platform.Architecture,
		"GOAMD64=v1", "GOFLAGS=-mod=readonly")
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, output)
	}
	return nil
}

// sourceKey hashes the Go files (tests aside) of this package and its programs in src. A
// program's binary then depends only on that hash and the Go version, as long as it imports the
// standard library alone, which sourceKey checks.
func sourceKey(src string) (string, error) {
	h := sha256.New()
	fset := token.NewFileSet()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		rel = filepath.ToSlash(rel)
		if strings.Contains(rel, "/") { // a program's file
			f, err := parser.ParseFile(fset, path, data, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				if first, _, _ := strings.Cut(p, "/"); strings.Contains(first, ".") {
					return fmt.Errorf("%s imports %s: the node image programs may import only the standard library, which the image cache key assumes", rel, p)
				}
			}
		}
		fmt.Fprintf(h, "\n%s %d\n", rel, len(data))
		_, err = h.Write(data)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("hash the node image sources in %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// imageKey is the cache key of s's archive: its sources, the Go version, the build flags and the
// image's config.
func imageKey(sources string, s spec) (string, error) {
	cfg, err := json.Marshal(s.configFile())
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s %s\n%q\n%s %s\n", sources, runtime.Version(), Platform.String(), goBuildFlags, s.ref, s.program)
	h.Write(cfg)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// archiveName is the file name of ref's archive with key: daemonguard.test/node-agent:v1 becomes
// node-agent_v1-KEY.tar.
func archiveName(ref, key string) string {
	return archivePrefix(ref) + key + ".tar"
}

func archivePrefix(ref string) string {
	last := ref[strings.LastIndex(ref, "/")+1:]
	return strings.ReplaceAll(last, ":", "_") + "-"
}

// staleAfter is how long an archive of an earlier key is kept: another checkout sharing the cache
// may still use it.
const staleAfter = 24 * time.Hour

// pruneStale removes archives of ref other than keep that were written more than staleAfter ago.
// It is best effort: a file it cannot remove is only disk space.
func pruneStale(dir, ref, keep string) {
	matches, _ := filepath.Glob(filepath.Join(dir, archivePrefix(ref)+"*.tar"))
	for _, m := range matches {
		if m == keep {
			continue
		}
		if fi, err := os.Stat(m); err == nil && time.Since(fi.ModTime()) > staleAfter {
			_ = os.Remove(m)
		}
	}
}
