package release

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// make chart pins only the image make image built for the same registry and version.
func TestChartRefusesAnotherBuild(t *testing.T) {
	cases := map[string]struct {
		built    string // image.ref's content; empty: no file
		registry string
		err      string
	}{
		"no image built yet": {
			err: "no image built into",
		},
		"the image was built for another registry": {
			built: "ghcr.io/daemonguard/daemonguard:v1.0.0@" + testDigest, registry: "r.example/team",
			err: "run make image with the same VERSION and REGISTRY first",
		},
		"the image is of another version": {
			built: "r.example/team/daemonguard:v0.9.0@" + testDigest, registry: "r.example/team",
			err: "run make image with the same VERSION and REGISTRY first",
		},
		"the recorded reference is broken": {
			built: "r.example/team/daemonguard:v1.0.0", registry: "r.example/team",
			err: "image.ref",
		},
	}
	for sentence, c := range cases {
		t.Run(sentence, func(t *testing.T) {
			out := t.TempDir()
			if c.built != "" {
				if err := os.WriteFile(filepath.Join(out, refFile), []byte(c.built+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			o := Options{Version: "v1.0.0", Registry: c.registry, OutDir: out}
			if _, err := o.Chart(context.Background()); err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Chart: %v, want an error containing %q", err, c.err)
			}
		})
	}
}

func TestPrintedDigest(t *testing.T) {
	cases := map[string]struct {
		stdout, want, err string
	}{
		"the reference on the last line": {
			stdout: "r.example/dg:v1@" + testDigest + "\n", want: testDigest,
		},
		"no output": {stdout: "", err: "printed no image reference"},
		"a reference without a digest": {
			stdout: "r.example/dg:v1\n", err: "has no digest",
		},
		"a digest that is no sha256 hex": {
			stdout: "r.example/dg@sha256:xyz\n", err: "non-hex",
		},
	}
	for sentence, c := range cases {
		t.Run(sentence, func(t *testing.T) {
			got, err := printedDigest(c.stdout)
			if expectError(t, got, err, c.err) {
				return
			}
			if err != nil || got.String() != c.want {
				t.Fatalf("printedDigest = %v, %v; want %s", got, err, c.want)
			}
		})
	}
}
