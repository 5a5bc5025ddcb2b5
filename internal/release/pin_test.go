package release

import (
	"os"
	"strings"
	"testing"

	"github.com/daemonguard/daemonguard/internal/toolbin"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestPinImage(t *testing.T) {
	cases := map[string]struct {
		values, want, err string
	}{
		"plain and quoted values are replaced, comments kept": {
			values: "# top\nimage:\n  # -- repo\n  repository: ghcr.io/x/y\n  tag: \"\"\n  digest: \"\"\n  pullPolicy: IfNotPresent\nother: 1\n",
			want:   "# top\nimage:\n  # -- repo\n  repository: \"r.example/team/daemonguard\"\n  tag: \"\"\n  digest: \"" + testDigest + "\"\n  pullPolicy: IfNotPresent\nother: 1\n",
		},
		"a trailing comment after a value goes with it": {
			values: "image:\n  repository: a # old\n  digest: '' # none\n",
			want:   "image:\n  repository: \"r.example/team/daemonguard\"\n  digest: \"" + testDigest + "\"\n",
		},
		"CRLF line endings stay": {
			values: "image:\r\n  repository: a\r\n  digest: \"\"\r\n",
			want:   "image:\r\n  repository: \"r.example/team/daemonguard\"\r\n  digest: \"" + testDigest + "\"\r\n",
		},
		"values without an image mapping are refused": {
			values: "webhook:\n  replicas: 2\n", err: "no image mapping",
		},
		"an image without a digest key is refused": {
			values: "image:\n  repository: a\n", err: "image.digest is not set to a scalar",
		},
		"a digest given as a list is refused": {
			values: "image:\n  repository: a\n  digest: []\n", err: "image.digest is not set to a scalar",
		},
		"a value on the next line is still replaced": {
			values: "image:\n  repository:\n    a\n  digest: \"\"\n",
			want:   "image:\n  repository:\n    \"r.example/team/daemonguard\"\n  digest: \"" + testDigest + "\"\n",
		},
		"a folded block scalar, which cannot be edited on its line, is refused": {
			values: "image:\n  repository: >-\n    a\n  digest: \"\"\n", err: "in place failed",
		},
		"broken YAML is refused": {
			values: "image: [\n", err: "yaml",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := PinImage([]byte(c.values), "r.example/team/daemonguard", testDigest)
			if expectError(t, got, err, c.err) {
				return
			}
			if err != nil || string(got) != c.want {
				t.Fatalf("PinImage = %v\n%s\nwant\n%s", err, got, c.want)
			}
		})
	}
}

// The chart's own values.yaml changes on exactly its two image lines.
func TestPinImageInTheChartValues(t *testing.T) {
	values, err := os.ReadFile(toolbin.RepoPath(t, "charts", "daemonguard", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := PinImage(values, "r.example/team/daemonguard", testDigest)
	if err != nil {
		t.Fatal(err)
	}
	before, after := strings.Split(string(values), "\n"), strings.Split(string(got), "\n")
	if len(before) != len(after) {
		t.Fatalf("line count changed from %d to %d", len(before), len(after))
	}
	var changed []string
	for i := range before {
		if before[i] != after[i] {
			changed = append(changed, strings.TrimSpace(after[i]))
		}
	}
	want := []string{`repository: "r.example/team/daemonguard"`, `digest: "` + testDigest + `"`}
	if strings.Join(changed, "\n") != strings.Join(want, "\n") {
		t.Fatalf("changed lines:\n%s\nwant:\n%s", strings.Join(changed, "\n"), strings.Join(want, "\n"))
	}
}
