package selftls

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestTheCAConfigMapHoldsTheBundleAlone syncs a rotator with no Secret yet: it makes the CA and
// the serving certificate, and the CA ConfigMap the chart renders then holds ca.crt, equal to
// the Secret's, and nothing else: no key of the Secret reaches what a scraper reads.
func TestTheCAConfigMapHoldsTheBundleAlone(t *testing.T) {
	tests := map[string]struct {
		configMap     *corev1.ConfigMap // as the chart renders it; nil: not rendered
		wantConfigMap bool
	}{
		"the chart's ConfigMap receives ca.crt alone, next to a key someone else put there": {
			configMap:     &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "guard", Name: "guard-webhook-ca"}, Data: map[string]string{"note": "kept"}},
			wantConfigMap: true,
		},
		"without the ConfigMap the rotator goes on and creates none": {},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme.Scheme)
			if tc.configMap != nil {
				b = b.WithObjects(tc.configMap)
			}
			c := b.Build()
			r := NewRotator(c, Options{Namespace: "guard", SecretName: "guard-webhook-tls", WebhookConfigurationName: "guard",
				CAConfigMapName: "guard-webhook-ca", CertDir: t.TempDir(), Config: Config{DNSNames: []string{"guard-webhook.guard.svc"}}}, logr.Discard())
			ctx := context.Background()
			for range 2 { // the second sync has nothing new to write
				if _, err := r.sync(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			var secret corev1.Secret
			if err := c.Get(ctx, types.NamespacedName{Namespace: "guard", Name: "guard-webhook-tls"}, &secret); err != nil {
				t.Fatal(err)
			}
			if len(secret.Data[KeyCAKey]) == 0 || len(secret.Data[KeyCABundle]) == 0 {
				t.Fatalf("the Secret holds %v, want the CA and its key", keys(secret.Data))
			}
			var cm corev1.ConfigMap
			err := c.Get(ctx, types.NamespacedName{Namespace: "guard", Name: "guard-webhook-ca"}, &cm)
			if !tc.wantConfigMap {
				if !apierrors.IsNotFound(err) {
					t.Fatalf("read the ConfigMap the chart did not render: %v, %+v; want none created", err, cm.Data)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cm.Data[KeyCABundle]; !bytes.Equal([]byte(got), secret.Data[KeyCABundle]) {
				t.Errorf("ConfigMap ca.crt %q, want the Secret's bundle %q", got, secret.Data[KeyCABundle])
			}
			if len(cm.Data) != 2 || cm.Data["note"] != "kept" || len(cm.BinaryData) != 0 {
				t.Errorf("ConfigMap holds %v, want ca.crt and the key it had", cm.Data)
			}
			for k, v := range cm.Data {
				if strings.Contains(v, "PRIVATE KEY") {
					t.Errorf("ConfigMap key %s holds a private key", k)
				}
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
