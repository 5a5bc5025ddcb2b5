package localcluster

import "testing"

func TestRepositoryStripsTagOrDigest(t *testing.T) {
	for ref, want := range map[string]string{
		"daemonguard.test/node-agent:v1":        "daemonguard.test/node-agent",
		"127.0.0.1:5000/daemonguard:0.1.0":      "127.0.0.1:5000/daemonguard",
		"127.0.0.1:5000/daemonguard@sha256:abc": "127.0.0.1:5000/daemonguard",
		"127.0.0.1:5000/daemonguard":            "127.0.0.1:5000/daemonguard",
		"nginx":                                 "nginx",
	} {
		if got := repository(ref); got != want {
			t.Errorf("repository(%q) = %q, want %q", ref, got, want)
		}
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b/rootfs`: "/tmp/a b/rootfs",
		`/plain/path`:        "/plain/path",
		`/trailing\`:         `/trailing\`,
	} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}
