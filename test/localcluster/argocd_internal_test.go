package localcluster

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// Without Debian's redis-server StartArgoCD must fail with the error tests skip on, naming the
// package to install, before it touches the cluster or builds anything.
func TestStartArgoCDWithoutRedisNamesThePackage(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := (&Cluster{}).StartArgoCD(context.Background(), ArgoCDOptions{})
	if !errors.Is(err, ErrRedisMissing) {
		t.Fatalf("StartArgoCD without redis-server on PATH: %v, want ErrRedisMissing", err)
	}
	if !strings.Contains(err.Error(), "redis-server package") {
		t.Errorf("the error does not name the Debian package: %v", err)
	}
}
