package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	uzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	cradmission "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The endpoints' request logger writes the lines controller-runtime's default one writes, field
// for field and with the same caller, whatever is logged through it and at which level; it only
// defers the request's fields to the lines that are written.
func TestRequestLoggerWritesWhatTheDefaultWrites(t *testing.T) {
	req := &cradmission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "705ab4f5-6393-11e8-b7cc-42010a800002", Name: "agent", Namespace: "team-a",
		Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"},
		UserInfo: authenticationv1.UserInfo{Username: "kubernetes-admin"},
	}}
	tests := map[string]struct {
		req *cradmission.Request // nil: the logger controller-runtime builds outside a request
		log func(logr.Logger)
	}{
		"an error":                        {req, func(l logr.Logger) { l.Error(errors.New("broken pipe"), "unable to encode response", "attempt", 2) }},
		"an info line":                    {req, func(l logr.Logger) { l.Info("received request") }},
		"a V(5) line, written at level 5": {req, func(l logr.Logger) { l.V(5).Info("received request") }},
		"a V(6) line, not written":        {req, func(l logr.Logger) { l.V(6).Info("received request") }},
		"values and a name added after":   {req, func(l logr.Logger) { l.WithName("validate").WithValues("policy", "p").Info("checked", "n", 1) }},
		"no request":                      {nil, func(l logr.Logger) { l.Error(errors.New("bad"), "bad request") }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			write := func(construct func(logr.Logger, *cradmission.Request) logr.Logger) []map[string]any {
				var buf bytes.Buffer
				base := zap.New(zap.WriteTo(&buf), zap.Level(zapcore.Level(-5)), zap.RawZapOpts(uzap.AddCaller())).WithName("admission")
				tc.log(construct(base, tc.req))
				var lines []map[string]any
				for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
					if line == "" {
						continue
					}
					var fields map[string]any
					if err := json.Unmarshal([]byte(line), &fields); err != nil {
						t.Fatalf("line %q: %v", line, err)
					}
					delete(fields, "ts")
					lines = append(lines, fields)
				}
				return lines
			}
			got, want := write(requestLogger), write(cradmission.DefaultLogConstructor)
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(want)
			if !bytes.Equal(gotJSON, wantJSON) {
				t.Errorf("request logger wrote\n%s\nthe default wrote\n%s", gotJSON, wantJSON)
			}
			if name != "a V(6) line, not written" && len(want) != 1 {
				t.Errorf("the default wrote %d lines, want 1: the test logs nothing", len(want))
			}
		})
	}
}
