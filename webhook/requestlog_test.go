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
		"values reused": func(l logr.Logger) {
			kv := []any{"n", 1}
			l = l.WithValues(kv...)
			kv[1] = 2
			l.Info("after the caller changed its list")
		},
	}
	for name, use := range uses {
		// From a base logger at V(0), and at V(1), where V(1) lines become V(2) lines and are
		// dropped like the disabled ones.
		for v, base := range []logr.Logger{base, base.V(1)} {
			lines = nil
			use(admission.DefaultLogConstructor(base, req))
			want := slices.Clone(lines)
			lines = nil
			use(lazyRequestLogger(base, req))
			if !slices.Equal(lines, want) {
				t.Errorf("%s from V(%d):\nlazy:    %q\ndefault: %q", name, v, lines, want)
			}
			wantLines := 1
			if name == "disabled level" || (v == 1 && name == "enabled level") { // errors log at any level
				wantLines = 0
			}
			if len(want) != wantLines {
				t.Errorf("%s from V(%d): %d lines, want %d: %q", name, v, len(want), wantLines, want)
			}
		}
	}
	if l := lazyRequestLogger(base, nil); l.GetSink() != base.GetSink() {
		t.Error("without a request the lazy logger is not the base logger")
	}
}

func helperLog(l logr.Logger) { l.Info("from a helper") }
