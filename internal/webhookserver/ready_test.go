package webhookserver

import (
	"context"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/policy"
)

// A replica is not ready until it has read the policy ConfigMaps once, whatever their set's fate.
func TestReadyOnlyOnceTheConfigMapsAreRead(t *testing.T) {
	cases := map[string]struct {
		configMaps  []corev1.ConfigMap
		wantHealthy bool
	}{
		"no policy ConfigMap: the built-ins load":    {wantHealthy: true},
		"a valid ConfigMap loads with the built-ins": {configMaps: []corev1.ConfigMap{policyConfigMap("team", withFile("no_latest.rego", goodRego))}, wantHealthy: true},
		"a broken ConfigMap is read, and rejected":   {configMaps: []corev1.ConfigMap{policyConfigMap("broken", withFile("broken.rego", parseErrorRego))}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := newTestReloader(t)
			builder := fake.NewClientBuilder().WithScheme(scheme.Scheme)
			for i := range c.configMaps {
				builder = builder.WithObjects(&c.configMaps[i])
			}
			initial, err := policy.Compile(context.Background(), r.builtin, r.builtinParams)
			if err != nil {
				t.Fatal(err)
			}
			r.client, r.namespace, r.log = builder.Build(), "daemonguard", logr.Discard()
			r.selector = labels.SelectorFromSet(labels.Set{admission.PolicyConfigMapLabel: "true"})
			r.engine, r.recorder = policy.NewEngine(initial), events.NewFakeRecorder(10)

			if err := r.ready(nil); err == nil {
				t.Fatal("ready before the ConfigMaps were read")
			}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{}); err != nil {
				t.Fatal(err)
			}
			if err := r.ready(nil); err != nil {
				t.Errorf("not ready after the ConfigMaps were read: %v", err)
			}
			if got := r.status.Load().Healthy; got != c.wantHealthy {
				t.Errorf("healthy %v, want %v", got, c.wantHealthy)
			}
		})
	}
}

// A replica that starts while a policy ConfigMap is broken has no last good set of its own: it
// serves the ConfigMaps the error does not blame, not the built-ins alone.
func TestFreshReplicaServesTheConfigMapsTheErrorDoesNotBlame(t *testing.T) {
	r := newTestReloader(t)
	valid := policyConfigMap("team", withFile("no_latest.rego", goodRego))
	broken := policyConfigMap("broken", withFile("broken.rego", parseErrorRego))
	initial, err := policy.Compile(context.Background(), r.builtin, r.builtinParams)
	if err != nil {
		t.Fatal(err)
	}
	r.client = fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(&valid, &broken).Build()
	r.namespace, r.log = "daemonguard", logr.Discard()
	r.selector = labels.SelectorFromSet(labels.Set{admission.PolicyConfigMapLabel: "true"})
	r.engine, r.recorder = policy.NewEngine(initial), events.NewFakeRecorder(10)

	if _, err := r.Reconcile(context.Background(), reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	modules := r.engine.Set().Modules()
	if !slices.Contains(modules, "configmap/team/no_latest.rego") || slices.Contains(modules, "configmap/broken/broken.rego") {
		t.Errorf("serving %v, want the valid ConfigMap's module and not the broken one's", modules)
	}
	if st := r.status.Load(); st.Healthy || !slices.Equal(st.Modules, modules) {
		t.Errorf("status %+v, want unhealthy with the modules served", st)
	}
}
