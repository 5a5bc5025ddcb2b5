package release

import (
	"fmt"
	"regexp"
	"strings"

	"golang.org/x/mod/semver"
)

// tagPattern is the OCI distribution spec's rule for a tag.
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// CheckVersion rejects a version that cannot be the image's tag: the version is stamped into the
// binary, tags the image and becomes the chart's appVersion, so all three must agree.
func CheckVersion(version string) error {
	if !tagPattern.MatchString(version) {
		return fmt.Errorf("version %q cannot tag an image: use letters, digits, '.', '_' and '-' (at most 128, not starting with '.' or '-'), e.g. the output of git describe --tags --always", version)
	}
	return nil
}

// ChartVersion turns a version from git describe into the chart's version, which helm requires to
// be SemVer: a release tag v1.2.3 (or v1.2.3-4-gabcdef0 after it) loses its "v"; a bare commit
// (a clone without tags: "abcdef0", "abcdef0-dirty") becomes a pre-release of 0.0.0 so it still
// sorts below every real release.
func ChartVersion(version string) (string, error) {
	if err := CheckVersion(version); err != nil {
		return "", err
	}
	v := "v" + strings.TrimPrefix(version, "v")
	if semver.IsValid(v) && semver.Canonical(v) == strings.SplitN(v, "+", 2)[0] {
		return v[1:], nil
	}
	// "git-" keeps the identifier alphanumeric: an all-digit hash such as 0123456 would be a
	// numeric identifier with a leading zero, which SemVer forbids.
	chart := "0.0.0-git-" + strings.ReplaceAll(version, "_", "-")
	if !semver.IsValid("v" + chart) {
		return "", fmt.Errorf("version %q makes no SemVer chart version (tried %q): tag the release vMAJOR.MINOR.PATCH", version, chart)
	}
	return chart, nil
}
