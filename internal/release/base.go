package release

import (
	"errors"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
)

// NonRootUser is the user the image runs as: distroless's "nonroot", and the chart's runAsUser.
const NonRootUser = "65532:65532"

// localBaseName names the locally made base in the KO_DEFAULTBASEIMAGE reference. ko resolves a
// base given by digest from KOCACHE/img before asking any registry, so the name is never looked
// up; it only says, in the image's base annotation, where the base came from.
const localBaseName = "local.invalid/daemonguard/nonroot-base"

// LocalBase is an image with no layers whose config runs as NonRootUser on platform: what
// distroless static nonroot provides a static Go binary, minus its CA bundle, tzdata and
// /etc/passwd, which daemonguard does not read. Its digest is the same on every machine (no
// creation time), so builds on it are reproducible.
func LocalBase(platform v1.Platform) (v1.Image, error) {
	cfg, err := empty.Image.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS = platform.OS
	cfg.Architecture = platform.Architecture
	cfg.Variant = platform.Variant
	cfg.Config.User = NonRootUser
	return mutate.ConfigFile(empty.Image, cfg)
}

// WriteLocalBase puts LocalBase into the OCI image layout at dir (ko's KOCACHE/img), creating the
// layout if needed and leaving any other image in it alone, and returns the reference ko takes as
// KO_DEFAULTBASEIMAGE.
func WriteLocalBase(dir string, platform v1.Platform) (string, error) {
	img, err := LocalBase(platform)
	if err != nil {
		return "", fmt.Errorf("make the local base image: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	path, err := layout.FromPath(dir)
	if errors.Is(err, os.ErrNotExist) {
		path, err = layout.Write(dir, empty.Index)
	}
	if err != nil {
		return "", fmt.Errorf("open the OCI layout %s: %w", dir, err)
	}
	index, err := path.ImageIndex()
	if err != nil {
		return "", fmt.Errorf("read the OCI layout %s: %w", dir, err)
	}
	found, err := partial.FindManifests(index, match.Digests(digest))
	if err != nil {
		return "", fmt.Errorf("read the OCI layout %s: %w", dir, err)
	}
	if len(found) == 0 {
		if err := path.AppendImage(img); err != nil {
			return "", fmt.Errorf("write the local base image into %s: %w", dir, err)
		}
	}
	return localBaseName + "@" + digest.String(), nil
}
