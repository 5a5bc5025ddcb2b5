package webhook

import (
	"errors"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// TestLazyRequestLoggerLogsAsTheDefault: whatever is logged through the lazy logger, with names,
// values, levels and call depths added, comes out as through admission.DefaultLogConstructor's,
// caller included.
func TestLazyRequestLoggerLogsAsTheDefault(t *testing.T) {
	var lines []string
	base := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" | "+args) }, funcr.Options{LogCaller: funcr.All, Verbosity: 1})
	req := &admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "u-1", Namespace: "ns", Name: "nginx-ds",
		Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"},
		UserInfo: authenticationv1.UserInfo{Username: "alice"},
	}}
	uses := map[string]func(logr.Logger){
		"info": func(l logr.Logger) { l.Info("hello", "k", 1) },
		"error with names": func(l logr.Logger) {
			l.WithName("x").WithValues("a", "b").WithName("y").Error(errors.New("boom"), "failed", "c", 2)
		},
		"enabled level":  func(l logr.Logger) { l.V(1).Info("verbose") },
		"disabled level": func(l logr.Logger) { l.V(2).Info("too verbose") },
		"call depth":     func(l logr.Logger) { helperLog(l.WithCallDepth(1)) },
		"values, then v": func(l logr.Logger) { l.WithValues("z", true).V(1).Error(nil, "err at v1") },
	}
	for name, use := range uses {
		lines = nil
		use(admission.DefaultLogConstructor(base, req))
		want := slices.Clone(lines)
		lines = nil
		use(lazyRequestLogger(base, req))
		if !slices.Equal(lines, want) {
			t.Errorf("%s:\nlazy:    %q\ndefault: %q", name, lines, want)
		}
		if name != "disabled level" && len(want) != 1 {
			t.Errorf("%s: %d lines, want 1: %q", name, len(want), want)
		}
	}
	if l := lazyRequestLogger(base, nil); l.GetSink() != base.GetSink() {
		t.Error("without a request the lazy logger is not the base logger")
	}
}

func helperLog(l logr.Logger) { l.Info("from a helper") }
