package nodeimages

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of an index entry that name the image on import: containerd's importer creates one
// image record per io.containerd.image.name; ref.name is the OCI spelling of the tag.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
)

// FromLayout writes the single-platform image in the OCI image layout at layoutDir (what `make
// image` writes into bin/release/image) as an archive to outTarball that imports as ref. ref is
// repo:tag, repo@sha256:… or repo:tag@sha256:… (the reference `make image` records); a digest in
// it must be the image's, and picks it when the layout holds several. The archive names the
// image by its tag and by its digest, so after the import containerd's CRI finds it as repo:tag,
// repo@sha256:… and repo:tag@sha256:…: a chart pinned by digest needs no `ctr images tag`.
func FromLayout(layoutDir, ref, outTarball string) (Image, error) {
	path, err := layout.FromPath(layoutDir)
	if err != nil {
		return Image{}, fmt.Errorf("open the OCI layout %s: %w", layoutDir, err)
	}
	index, err := path.ImageIndex()
	if err != nil {
		return Image{}, fmt.Errorf("read the OCI layout %s: %w", layoutDir, err)
	}
	manifest, err := index.IndexManifest()
	if err != nil {
		return Image{}, fmt.Errorf("read the OCI layout %s: %w", layoutDir, err)
	}
	desc, err := pickImage(manifest.Manifests, ref)
	if err != nil {
		return Image{}, fmt.Errorf("the OCI layout %s: %w", layoutDir, err)
	}
	img, err := path.Image(desc.Digest)
	if err != nil {
		return Image{}, fmt.Errorf("read image %s from the OCI layout %s: %w", desc.Digest, layoutDir, err)
	}
	if err := writeArchiveFile(outTarball, img, ref); err != nil {
		return Image{}, fmt.Errorf("write %s as %s: %w", layoutDir, outTarball, err)
	}
	return Image{Ref: ref, Tarball: outTarball}, nil
}

// pickImage finds the image a layout's index lists for ref: the one of ref's digest, else the
// only one.
func pickImage(manifests []v1.Descriptor, ref string) (v1.Descriptor, error) {
	if _, pinned, ok := strings.Cut(ref, "@"); ok {
		for _, m := range manifests {
			if m.Digest.String() == pinned {
				if !m.MediaType.IsImage() {
					return v1.Descriptor{}, fmt.Errorf("%s is a %s, not a single-platform image", pinned, m.MediaType)
				}
				return m, nil
			}
		}
		return v1.Descriptor{}, fmt.Errorf("holds no image %s (reference %s)", pinned, ref)
	}
	var images []v1.Descriptor
	for _, m := range manifests {
		if m.MediaType.IsImage() {
			images = append(images, m)
		}
	}
	if len(images) != 1 {
		return v1.Descriptor{}, fmt.Errorf("holds %d single-platform images and reference %s names no digest to pick one", len(images), ref)
	}
	return images[0], nil
}

// importNames are the names containerd records for an image of digest imported as ref: its tag
// (when ref has one, or "latest" when ref has neither tag nor digest) and repo@digest, both in
// the normalized form containerd's CRI looks up (docker.io/library/… for Docker Hub).
func importNames(ref string, digest v1.Hash) ([]string, error) {
	base, pinned, hasDigest := strings.Cut(ref, "@")
	if hasDigest && pinned != digest.String() {
		return nil, fmt.Errorf("reference %s pins %s, but the image is %s", ref, pinned, digest)
	}
	tag, err := name.NewTag(base)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	registry := tag.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	repo := registry + "/" + tag.RepositoryStr()
	var names []string
	explicitTag := strings.Contains(base[strings.LastIndex(base, "/")+1:], ":")
	if explicitTag || !hasDigest {
		names = append(names, repo+":"+tag.TagStr())
	}
	return append(names, repo+"@"+digest.String()), nil
}

// writeArchiveFile writes img to path as an OCI archive naming it ref, replacing path at once
// so that no reader sees half an archive.
func writeArchiveFile(path string, img v1.Image, ref string) error {
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	names, err := importNames(ref, digest)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".archive-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := writeArchive(tmp, img, names); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeArchive writes img as a tar of an OCI image layout whose index lists img once per name,
// each entry annotated with that name.
func writeArchive(w io.Writer, img v1.Image, names []string) error {
	manifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	mediaType, err := img.MediaType()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configName, err := img.ConfigName()
	if err != nil {
		return err
	}
	configFile, err := img.ConfigFile()
	if err != nil {
		return err
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, n := range names {
		annotations := map[string]string{annotationImageName: n}
		if !strings.Contains(n, "@") {
			annotations[annotationRefName] = n[strings.LastIndex(n, ":")+1:]
		}
		index.Manifests = append(index.Manifests, v1.Descriptor{
			MediaType:   mediaType,
			Size:        int64(len(manifest)),
			Digest:      digest,
			Platform:    configFile.Platform(),
			Annotations: annotations,
		})
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	if err := writeTarFile(tw, "oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := writeTarFile(tw, "index.json", indexJSON); err != nil {
		return err
	}
	if err := writeTarFile(tw, blobPath(digest), manifest); err != nil {
		return err
	}
	if err := writeTarFile(tw, blobPath(configName), config); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	written := map[v1.Hash]bool{digest: true, configName: true}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		if written[d] {
			continue
		}
		written[d] = true
		if err := writeLayer(tw, d, l); err != nil {
			return fmt.Errorf("layer %s: %w", d, err)
		}
	}
	return tw.Close()
}

func writeLayer(tw *tar.Writer, digest v1.Hash, l v1.Layer) error {
	size, err := l.Size()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := tw.WriteHeader(blobHeader(blobPath(digest), size)); err != nil {
		return err
	}
	n, err := io.Copy(tw, rc)
	if err != nil {
		return err
	}
	if n != size {
		return fmt.Errorf("read %d bytes, the manifest says %d", n, size)
	}
	return nil
}

func writeTarFile(tw *tar.Writer, path string, data []byte) error {
	if err := tw.WriteHeader(blobHeader(path, int64(len(data)))); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func blobHeader(path string, size int64) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: 0o644, Size: size, ModTime: time.Unix(0, 0)}
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
