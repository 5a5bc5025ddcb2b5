package webhookserver

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/daemonguard/daemonguard/internal/inprocess"
	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// TestInProcessStatus: the webhook tells whether the live in-process injection policy does what
// the policy set in force decides. The live policy is served by a fake client (a pure unit; the
// generated policy itself is tested against a real API server in internal/inprocess).
func TestInProcessStatus(t *testing.T) {
	builtin, params, err := policy.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	liveObjs, err := inprocess.Generate(ctx, builtin, params, inprocess.Options{Name: "dg-inject"})
	if err != nil {
		t.Fatal(err)
	}
	configMap := corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "daemonguard"}}
	cases := map[string]struct {
		files      map[string]string
		noPolicy   bool
		server     kubesupport.Server // the API server; one that serves v1 when zero
		inSync     bool
		reasonPart string
	}{
		"the built-ins match the policy generated from them": {inSync: true},
		"a validation policy from a ConfigMap changes nothing": {inSync: true, files: map[string]string{
			"team.rego": "package daemonguard.policies.team\nviolation contains {\"field\": \"x\", \"msg\": \"y\"} if false\n",
		}},
		"other inject parameters": {reasonPart: "generated from other inject parameters", files: map[string]string{
			"parameters.yaml": "inject: {priorityClassName: system-cluster-critical}\n",
		}},
		"a replaced inject policy": {reasonPart: "configmap/team/inject.rego", files: map[string]string{
			"inject.rego": "package daemonguard.inject\ndecision := {\"inject\": false, \"reason\": \"mine\"}\n",
		}},
		"no policy in the cluster": {noPolicy: true, reasonPart: "does not exist"},
		"a server without MutatingAdmissionPolicy v1": {noPolicy: true, server: kubesupport.Server{Version: "v1.34.4", Minor: 34},
			reasonPart: "this server (v1.34.4) does not: let the DaemonSet mutating webhook inject"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			modules, merged, err := policy.OverBuiltin([]policy.Source{{Name: "configmap/team", Files: c.files}})
			if err != nil {
				t.Fatal(err)
			}
			var objs []client.Object
			if !c.noPolicy {
				objs = append(objs, liveObjs.Policy.DeepCopy())
			}
			if c.server == (kubesupport.Server{}) {
				c.server = kubesupport.Server{Version: "v1.37.2", Minor: 37, MutatingAdmissionPolicyV1: true}
			}
			recorder := events.NewFakeRecorder(10)
			r := &policyReloader{
				recorder: recorder, log: logr.Discard(),
				inProcess: &inProcessCheck{policy: "dg-inject", reader: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objs...).Build(),
					unavailable: c.server.InProcessInjection()},
			}
			r.checkInProcess(ctx, modules, merged, []corev1.ConfigMap{configMap})
			got := r.status.Load().InProcessInjection
			if got == nil || got.InSync != c.inSync || !strings.Contains(got.Reason, c.reasonPart) || got.Policy != "dg-inject" {
				t.Fatalf("status %+v, want inSync %v and a reason with %q", got, c.inSync, c.reasonPart)
			}
			select {
			case e := <-recorder.Events:
				if c.inSync || !strings.Contains(e, "InProcessInjectionOutOfSync") {
					t.Errorf("event %q", e)
				}
			default:
				if !c.inSync {
					t.Error("no Event for an out-of-sync policy")
				}
			}
			// The same outcome again is not reported again.
			r.checkInProcess(ctx, modules, merged, []corev1.ConfigMap{configMap})
			if len(recorder.Events) != 0 {
				t.Errorf("a repeated outcome was reported again: %q", <-recorder.Events)
			}
		})
	}
}
