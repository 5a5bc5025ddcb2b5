package inprocess

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/policy"
)

func overlay(t *testing.T, files map[string]string) ([]policy.Module, map[string]any) {
	t.Helper()
	modules, params, err := policy.OverBuiltin([]policy.Source{{Name: "configmap/test", Files: files}})
	if err != nil {
		t.Fatal(err)
	}
	return modules, params
}

func TestGenerateRefusesWhatCELCannotFollow(t *testing.T) {
	cases := map[string]struct {
		files   map[string]string
		refused bool
	}{
		"the built-ins are generated": {},
		"an extra validation policy leaves injection alone": {files: map[string]string{
			"team.rego": "package daemonguard.policies.team\nviolation contains {\"field\": \"x\", \"msg\": \"y\"} if false\n",
		}},
		"parameters from a ConfigMap are followed": {files: map[string]string{"parameters.yaml": "inject: {priorityClassName: x}\n"}},
		"a replaced inject policy is refused": {refused: true, files: map[string]string{
			"inject.rego": "package daemonguard.inject\ndecision := {\"inject\": false, \"reason\": \"mine\"}\n",
		}},
		"a replaced lib is refused": {refused: true, files: map[string]string{
			"lib.rego": "package daemonguard.lib\nnamespace_class := \"default\"\n",
		}},
		"a module below the inject package is refused": {refused: true, files: map[string]string{
			"more.rego": "package daemonguard.inject.more\nx := 1\n",
		}},
		"rules in the parameters package are refused": {refused: true, files: map[string]string{
			"params.rego": "package daemonguard.parameters\ninject := {\"enabled\": false}\n",
		}},
		"a module above every package is refused": {refused: true, files: map[string]string{
			"top.rego": "package daemonguard\nx := 1\n",
		}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			modules, params := overlay(t, c.files)
			_, err := Generate(context.Background(), modules, params, Options{Name: "p"})
			if c.refused != errors.Is(err, ErrNotGeneratable) {
				t.Fatalf("error %v, refused want %v", err, c.refused)
			}
			if c.refused && !strings.Contains(err.Error(), "configmap/test/") {
				t.Errorf("error %q does not name the module", err)
			}
		})
	}
}

func TestDeriveEvaluatesTheInjectPolicyPerClass(t *testing.T) {
	modules, params := overlay(t, map[string]string{"parameters.yaml": `
namespaceClasses:
- {name: critical, namespaces: [a, b]}
- {name: shadowed, namespaces: [a]}
- {name: agents, matchLabels: {tier: agents}}
- {name: shadowed-labels, matchLabels: {tier: agents}}
- {name: only-excluded, namespaces: [x]}
- {name: disabled, namespaces: [o]}
inject:
  excludedNamespaces: [x]
  namespaceClasses:
    critical:
      priorityClassName: system-cluster-critical
      tolerations:
      - {key: k, operator: Exists}
      - {key: k, operator: Exists, effect: NoSchedule}
      - {key: d, value: v, effect: NoExecute, tolerationSeconds: 5}
    agents: {priorityClassName: "", excludedLabels: {skip: "yes"}}
    disabled: {enabled: false}
`})
	inject, lib, err := builtinInjectModules(modules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := derive(context.Background(), []policy.Module{lib, inject}, params)
	if err != nil {
		t.Fatal(err)
	}
	cp := []corev1.Toleration{
		{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: "node-role.kubernetes.io/master", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	want := map[string]class{
		"critical": {name: "critical", inject: true, priorityClassName: "system-cluster-critical", excludedNamespaces: []string{"x"}, tolerations: []corev1.Toleration{
			{Key: "k", Operator: corev1.TolerationOpExists},
			{Key: "d", Value: "v", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5)},
		}},
		"agents":        {name: "agents", inject: true, tolerations: cp, excludedNamespaces: []string{"x"}, excludedLabels: map[string]string{"skip": "yes"}},
		"only-excluded": {name: "only-excluded", excludedNamespaces: []string{"x"}},
		"disabled":      {name: "disabled", excludedNamespaces: []string{"x"}},
	}
	if !reflect.DeepEqual(got.byName, want) {
		g, _ := yaml.Marshal(got.byName)
		t.Errorf("classes:\n%+v\nwant\n%+v\n%s", got.byName, want, g)
	}
	def := class{name: "default", inject: true, tolerations: cp, priorityClassName: "system-node-critical", excludedNamespaces: []string{"x"}}
	if !reflect.DeepEqual(got.def, def) {
		t.Errorf("default class %+v, want %+v", got.def, def)
	}
}
