package charts

import (
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/cli"
	"github.com/daemonguard/daemonguard/test/golden"
	"github.com/daemonguard/daemonguard/webhook"
)

// TestWebhookConfigurationsMatchCode keeps the chart's webhook configurations from drifting from
// webhook.Configurations, which the demo and the integration tests register: same webhooks,
// names, paths, rules, selectors and conditions, plus only what values append.
func TestWebhookConfigurationsMatchCode(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			objs := objects(t, render(t, c))
			gotMutating := only[*admissionregistrationv1.MutatingWebhookConfiguration](t, objs)
			gotValidating := only[*admissionregistrationv1.ValidatingWebhookConfiguration](t, objs)

			opts := c.webhooks
			opts.Name, opts.Namespace = c.fullname, namespace
			if opts.URL == "" {
				opts.Service = &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: c.fullname + "-webhook", Port: ptr.To[int32](443)}
			}
			wantMutating, wantValidating := webhook.Configurations(opts)
			c.extra.appendTo(wantMutating, wantValidating)

			for _, got := range []string{gotMutating.Name, gotValidating.Name} {
				if got != c.fullname {
					t.Errorf("webhook configuration named %q, want %q (the name the binary writes the caBundle into)", got, c.fullname)
				}
			}
			wantAnnotations := map[string]string(nil)
			if !c.selfManaged {
				wantAnnotations = map[string]string{"cert-manager.io/inject-ca-from": namespace + "/" + c.fullname + "-webhook-tls"}
			}
			for kind, got := range map[string]map[string]string{"mutating": gotMutating.Annotations, "validating": gotValidating.Annotations} {
				if !reflect.DeepEqual(got, wantAnnotations) {
					t.Errorf("%s configuration annotations %v, want %v", kind, got, wantAnnotations)
				}
			}
			compareWebhooks(t, gotMutating.Webhooks, wantMutating.Webhooks, func(w *admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.WebhookClientConfig {
				return &w.ClientConfig
			})
			compareWebhooks(t, gotValidating.Webhooks, wantValidating.Webhooks, func(w *admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.WebhookClientConfig {
				return &w.ClientConfig
			})
		})
	}
}

// appendTo appends what values add to the configurations webhook.Configurations returned.
func (e extraWebhookFields) appendTo(m *admissionregistrationv1.MutatingWebhookConfiguration, v *admissionregistrationv1.ValidatingWebhookConfiguration) {
	for i := range m.Webhooks {
		w := &m.Webhooks[i]
		w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions, e.namespaceExpressions...)
		if w.ObjectSelector != nil { // the DaemonSet webhook; the pod webhook has a matchCondition instead
			w.ObjectSelector.MatchExpressions = append(w.ObjectSelector.MatchExpressions, e.objectExpressions...)
		}
		w.MatchConditions = append(w.MatchConditions, e.matchConditions...)
	}
	for i := range v.Webhooks {
		w := &v.Webhooks[i]
		w.NamespaceSelector.MatchExpressions = append(w.NamespaceSelector.MatchExpressions, e.namespaceExpressions...)
		// No object selector: a label on the object never exempts it from validation.
		w.MatchConditions = append(w.MatchConditions, e.matchConditions...)
	}
}

// compareWebhooks compares rendered webhooks with the code's one by one and prints a YAML diff of
// each that differs. The chart must render no caBundle: the binary or cert-manager writes it.
func compareWebhooks[W any](t *testing.T, got, want []W, clientConfig func(*W) *admissionregistrationv1.WebhookClientConfig) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("rendered %d webhooks, webhook.Configurations returns %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if cc := clientConfig(&got[i]); len(cc.CABundle) != 0 {
			t.Errorf("webhook %d renders a caBundle; the chart must leave it to the binary or cert-manager", i)
		}
		clientConfig(&want[i]).CABundle = nil
		if !reflect.DeepEqual(got[i], want[i]) {
			gotYAML, _ := yaml.Marshal(got[i])
			wantYAML, _ := yaml.Marshal(want[i])
			t.Errorf("webhook %d differs from the code:\n%s", i, golden.Diff(wantYAML, gotYAML, "webhook.Configurations", "chart", 3))
		}
	}
}

// TestArgumentsAreFlagsOfTheBinary parses each container's arguments with the daemonguard
// command tree itself, so a renamed flag or a value it cannot parse (a duration, an IP address)
// fails here instead of in a crash-looping pod.
func TestArgumentsAreFlagsOfTheBinary(t *testing.T) {
	for name, c := range renderCases {
		t.Run(name, func(t *testing.T) {
			deployments := typedObjects[*appsv1.Deployment](objects(t, render(t, c)))
			want := 1
			if c.controller {
				want = 2
			}
			if len(deployments) != want {
				t.Fatalf("rendered %d Deployments, want %d", len(deployments), want)
			}
			for _, d := range deployments {
				for _, container := range d.Spec.Template.Spec.Containers {
					if len(container.Command) != 0 {
						t.Errorf("%s/%s sets command %v; the image's entrypoint is the binary", d.Name, container.Name, container.Command)
					}
					if len(container.Args) == 0 {
						t.Fatalf("%s/%s has no arguments", d.Name, container.Name)
					}
					sub := subcommand(t, container.Args[0])
					for _, arg := range container.Args[1:] {
						name, _, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
						if !ok || !strings.HasPrefix(arg, "--") {
							t.Errorf("%s/%s argument %q is not --flag=value", d.Name, container.Name, arg)
						} else if sub.Flags().Lookup(name) == nil {
							t.Errorf("%s/%s argument %q: daemonguard %s has no flag --%s", d.Name, container.Name, arg, sub.Name(), name)
						}
					}
					if err := sub.ParseFlags(container.Args[1:]); err != nil {
						t.Errorf("%s/%s arguments do not parse: %v", d.Name, container.Name, err)
					}
					if h2, err := sub.Flags().GetBool("enable-http2"); err != nil || h2 != c.http2 {
						t.Errorf("%s/%s --enable-http2 is %v (%v), want %v", d.Name, container.Name, h2, err, c.http2)
					}
				}
			}
		})
	}
}

// subcommand returns a fresh daemonguard subcommand, so parsed flags do not leak between cases.
func subcommand(t *testing.T, name string) *cobra.Command {
	t.Helper()
	for _, c := range cli.New().Commands() {
		if c.Name() == name {
			return c
		}
	}
	t.Fatalf("daemonguard has no subcommand %q", name)
	return nil
}
