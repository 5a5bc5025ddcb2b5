package release

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	yaml "go.yaml.in/yaml/v3"
)

// ChartOptions say what PackageChart packages and where it pushes it.
type ChartOptions struct {
	Helm     string      // the helm binary (make testbin builds it)
	ChartDir string      // charts/daemonguard
	Version  string      // the version of the image build: the chart's appVersion, and its version via ChartVersion
	Image    name.Digest // the image the chart's values pin
	OutDir   string      // where the .tgz goes
	Registry string      // when set, push to oci://<Registry>/charts
	Env      []string    // helm's environment; nil is this process's
	Log      io.Writer   // helm's output
}

// Chart is the result of PackageChart.
type Chart struct {
	Path    string // the packaged .tgz
	Version string // the chart's SemVer version
	Ref     string // oci://<Registry>/charts/daemonguard when pushed
}

// PackageChart packages the chart with `helm package`, its version and appVersion from the image
// build and its values pinning that image by digest, and with Registry set pushes it with
// `helm push`. The chart folder itself is left as it is; a copy is packaged.
func PackageChart(ctx context.Context, o ChartOptions) (Chart, error) {
	chartVersion, err := ChartVersion(o.Version)
	if err != nil {
		return Chart{}, err
	}
	if o.Image.Context().Name() == "" || o.Image.DigestStr() == "" {
		return Chart{}, errors.New("no image to pin in the chart")
	}
	tmp, err := os.MkdirTemp("", "daemonguard-chart-")
	if err != nil {
		return Chart{}, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, filepath.Base(o.ChartDir))
	if err := os.CopyFS(dir, os.DirFS(o.ChartDir)); err != nil {
		return Chart{}, fmt.Errorf("copy the chart: %w", err)
	}
	valuesPath := filepath.Join(dir, "values.yaml")
	values, err := os.ReadFile(valuesPath)
	if err != nil {
		return Chart{}, err
	}
	values, err = PinImage(values, o.Image.Context().Name(), o.Image.DigestStr())
	if err != nil {
		return Chart{}, fmt.Errorf("%s: %w", filepath.Join(o.ChartDir, "values.yaml"), err)
	}
	if err := os.WriteFile(valuesPath, values, 0o644); err != nil {
		return Chart{}, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return Chart{}, err
	}
	if _, err := runHelm(ctx, o, "package", dir, "--version", chartVersion, "--app-version", o.Version, "--destination", o.OutDir); err != nil {
		return Chart{}, err
	}
	c := Chart{Path: filepath.Join(o.OutDir, filepath.Base(o.ChartDir)+"-"+chartVersion+".tgz"), Version: chartVersion}
	if _, err := os.Stat(c.Path); err != nil {
		return Chart{}, fmt.Errorf("helm package wrote no %s: %w", c.Path, err)
	}
	if o.Registry == "" {
		return c, nil
	}
	push := []string{"push", c.Path, "oci://" + o.Registry + "/charts"}
	plain, err := PlainHTTP(o.Registry)
	if err != nil {
		return Chart{}, err
	}
	if plain {
		push = append(push, "--plain-http")
	}
	if _, err := runHelm(ctx, o, push...); err != nil {
		return Chart{}, err
	}
	c.Ref = "oci://" + o.Registry + "/charts/" + filepath.Base(o.ChartDir)
	return c, nil
}

// PlainHTTP tells whether registry (host[:port][/path]) is spoken to over plain HTTP: a loopback or
// private-network address, by go-containerregistry's rule, which ko's push follows too; helm has to
// be told with --plain-http.
func PlainHTTP(registry string) (bool, error) {
	host, _, _ := strings.Cut(registry, "/")
	reg, err := name.NewRegistry(host)
	if err != nil {
		return false, fmt.Errorf("registry %q: %w", registry, err)
	}
	return reg.Scheme() == "http", nil
}

func runHelm(ctx context.Context, o ChartOptions, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, o.Helm, args...)
	cmd.Env = o.Env
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(&out, o.Log)
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// PinImage sets image.repository and image.digest in a values.yaml, changing only the two values
// on their lines so that every comment (the chart's documentation) stays.
func PinImage(values []byte, repository, digest string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(values, &doc); err != nil {
		return nil, err
	}
	lines := strings.SplitAfter(string(values), "\n")
	set := map[string]string{"repository": repository, "digest": digest}
	for _, key := range []string{"repository", "digest"} {
		node, err := imageValue(&doc, key)
		if err != nil {
			return nil, err
		}
		quoted, err := json.Marshal(set[key]) // a JSON string is a YAML double-quoted scalar
		if err != nil {
			return nil, err
		}
		line := lines[node.Line-1]
		ending := line[len(strings.TrimRight(line, "\r\n")):]
		// Anything after the value on its line (a trailing comment) goes with the old value.
		lines[node.Line-1] = line[:node.Column-1] + string(quoted) + ending
	}
	out := []byte(strings.Join(lines, ""))
	var check struct {
		Image struct {
			Repository string `yaml:"repository"`
			Digest     string `yaml:"digest"`
		} `yaml:"image"`
	}
	if err := yaml.Unmarshal(out, &check); err != nil || check.Image.Repository != repository || check.Image.Digest != digest {
		return nil, fmt.Errorf("setting image.repository and image.digest in place failed (read back %+v, %v)", check.Image, err)
	}
	return out, nil
}

// imageValue finds the scalar value of image.<key>, which must sit alone on its line after the key.
func imageValue(doc *yaml.Node, key string) (*yaml.Node, error) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errors.New("not a YAML document")
	}
	image := mappingValue(doc.Content[0], "image")
	if image == nil || image.Kind != yaml.MappingNode {
		return nil, errors.New("no image mapping")
	}
	v := mappingValue(image, key)
	if v == nil || v.Kind != yaml.ScalarNode {
		return nil, fmt.Errorf("image.%s is not set to a scalar", key)
	}
	return v, nil
}

func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
