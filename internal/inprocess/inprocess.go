// Package inprocess generates the MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, served
// from Kubernetes 1.36: kubesupport decides where it can be used) and its binding that make the
// API server itself inject what daemonguard's mutating webhook injects into DaemonSet pod
// templates: the control-plane tolerations and the priority class, appended only where missing,
// nothing removed or reordered, an already-injected object left unchanged.
//
// The Rego inject policy stays the one definition of what is injected. The generator evaluates
// the real policy (policy.Set.Inject, and the policy's own settings rules through OPA) once per
// namespace class, and bakes each class's answer into CEL; only the structure the policy reads
// (which class a namespace falls in, the exclusions, the opt-out annotation) is written out as CEL
// here. A differential test on a real API server holds the generated policy to the webhook.
//
// The generated policy cannot follow an inject policy (or lib) replaced or extended in Rego from
// ConfigMaps or --policies: Generate refuses with ErrNotGeneratable then.
package inprocess

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/kubesupport"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/webhook"
)

// Options say where the generated objects apply. They mirror webhook.ConfigurationOptions, whose
// selectors the binding takes over unchanged.
type Options struct {
	// Name of the policy and of its binding.
	Name string
	// Namespace is daemonguard's own namespace: exempt, like kube-system and ExemptNamespaces.
	Namespace        string
	ExemptNamespaces []string
	// FailurePolicy applies when a CEL expression fails at run time (default Fail, as the webhook).
	FailurePolicy admissionregistrationv1.FailurePolicyType
}

// Objects are the generated policy and binding.
type Objects struct {
	Policy  *admissionregistrationv1.MutatingAdmissionPolicy
	Binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
}

// ErrNotGeneratable says the policy set's inject decision cannot be expressed as a generated
// policy: the inject policy or its library was replaced or extended in Rego.
var ErrNotGeneratable = errors.New("in-process injection cannot follow this policy set")

// Package paths the generated policy depends on.
const (
	injectPackage = "data.daemonguard.inject"
	libPackage    = "data.daemonguard.lib"
	paramsPackage = "data.daemonguard.parameters"
)

// Generate returns the policy and binding for a policy set's modules and parameters (as
// policy.Builtin and policy.Overlay return them). It fails with ErrNotGeneratable when the inject
// policy or lib is not the built-in one.
func Generate(ctx context.Context, modules []policy.Module, params map[string]any, o Options) (*Objects, error) {
	inject, lib, err := builtinInjectModules(modules)
	if err != nil {
		return nil, err
	}
	classes, err := derive(ctx, []policy.Module{lib, inject}, params)
	if err != nil {
		return nil, err
	}
	return build(classes, o), nil
}

// builtinInjectModules returns the inject and lib modules when both are the embedded ones and no
// other module defines rules in, below or above their packages or the parameters.
func builtinInjectModules(modules []policy.Module) (inject, lib policy.Module, err error) {
	builtin, _, err := policy.Builtin()
	if err != nil {
		return inject, lib, err
	}
	embedded := map[string]string{}
	for _, m := range builtin {
		p, err := packageOf(m)
		if err != nil {
			return inject, lib, err
		}
		embedded[p] = m.Source
	}
	related := func(a, b string) bool {
		return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".") ||
			strings.HasPrefix(a, b+"[") || strings.HasPrefix(b, a+"[")
	}
	found := map[string]int{}
	var foreign []string
	for _, m := range modules {
		p, err := packageOf(m)
		if err != nil {
			return inject, lib, err
		}
		if (p == injectPackage || p == libPackage) && m.Source == embedded[p] {
			found[p]++
			if p == injectPackage {
				inject = m
			} else {
				lib = m
			}
			continue
		}
		for _, q := range []string{injectPackage, libPackage, paramsPackage} {
			if related(p, q) {
				foreign = append(foreign, fmt.Sprintf("%s (package %s)", m.Name, strings.TrimPrefix(p, "data.")))
				break
			}
		}
	}
	if len(foreign) > 0 {
		return inject, lib, fmt.Errorf("%w: the inject policy or its library is replaced or extended in Rego by %s; "+
			"the API server cannot evaluate Rego, so keep injection in the webhook (in-process injection off)", ErrNotGeneratable, strings.Join(foreign, ", "))
	}
	for _, p := range []string{injectPackage, libPackage} {
		if found[p] != 1 {
			return inject, lib, fmt.Errorf("%w: package %s is loaded %d times, want the built-in once", ErrNotGeneratable, strings.TrimPrefix(p, "data."), found[p])
		}
	}
	return inject, lib, nil
}

func packageOf(m policy.Module) (string, error) {
	mod, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", m.Name, err)
	}
	return mod.Package.Path.String(), nil
}

// matcher is one namespaceClasses entry as lib.class_matches reads it.
type matcher struct {
	name        string
	namespaces  []string          // only strings can equal a namespace name
	matchLabels map[string]string // nil: never matches by labels (empty, or a non-string value)
}

// class is what the inject policy decides for the namespaces of one class.
type class struct {
	name string
	// inject is false when the class injects nothing anywhere (disabled, or nothing configured).
	inject             bool
	tolerations        []corev1.Toleration // those to append, each not covered by an earlier one
	priorityClassName  string
	excludedNamespaces []string
	excludedLabels     map[string]string // nil: no label exclusion
}

// classes is the derived decision table: matchers in the policy's order (first match wins), the
// settings of every reachable class by name, and the default class.
type classes struct {
	matchers []matcher
	byName   map[string]class
	def      class
}

// derive evaluates the inject policy once per namespace class.
func derive(ctx context.Context, modules []policy.Module, params map[string]any) (*classes, error) {
	set, err := policy.Compile(ctx, modules, params)
	if err != nil {
		return nil, err
	}
	// Asked of the compiled set, so the query runs in the same sandbox and on the same data.
	query, err := set.PrepareQuery(ctx, `class := data.daemonguard.lib.namespace_class; enabled := [true | data.daemonguard.inject.enabled]; `+
		`excludedNamespaces := data.daemonguard.inject.excluded_namespaces; excludedLabels := data.daemonguard.inject.excluded_labels`)
	if err != nil {
		return nil, fmt.Errorf("prepare inject settings query: %w", err)
	}

	out := &classes{byName: map[string]class{}, matchers: namespaceClasses(params)}
	fresh := freshName(params)
	// Probes reaching each class: a namespace named in its list (no labels, so no class matches by
	// labels), or a fresh name carrying exactly its matchLabels. Every namespace that falls in a
	// class is reached by one of them unless an earlier class takes it, which then takes the probe too.
	for _, m := range out.matchers {
		if _, done := out.byName[m.name]; done {
			continue // settings are per class name: the first entry of a name answers for all
		}
		var probes []probe
		if m.matchLabels != nil {
			probes = append(probes, probe{fresh, m.matchLabels})
		}
		for _, n := range m.namespaces {
			probes = append(probes, probe{n, map[string]string{}})
		}
		c, ok, err := evalClass(ctx, set, query, m.name, probes)
		if err != nil {
			return nil, err
		}
		if ok {
			out.byName[m.name] = c
		}
	}
	def, ok, err := evalClass(ctx, set, query, "default", []probe{{fresh, map[string]string{}}})
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("a namespace %q without labels is not in the default class", fresh)
	}
	out.def = def
	return out, nil
}

// probe is a namespace the inject policy is asked about.
type probe struct {
	name   string
	labels map[string]string
}

// evalClass evaluates the probes in order and returns the class's settings from the first probe
// that falls in class want and is not excluded by name; ok is false when none falls in want.
func evalClass(ctx context.Context, set *policy.Set, query rego.PreparedEvalQuery, want string, probes []probe) (class, bool, error) {
	var found *class
	for _, p := range probes {
		labels := map[string]any{}
		for k, v := range p.labels {
			labels[k] = v
		}
		rs, err := query.Eval(ctx, rego.EvalInput(map[string]any{
			"operation": string(policy.OpCreate), "object": map[string]any{},
			"namespace": map[string]any{"name": p.name, "labels": labels},
		}))
		if err != nil {
			return class{}, false, fmt.Errorf("evaluate inject settings: %w", err)
		}
		if len(rs) != 1 {
			return class{}, false, fmt.Errorf("evaluate inject settings: %d results, want 1", len(rs))
		}
		b := rs[0].Bindings
		if b["class"] != want {
			continue
		}
		c := class{name: want, excludedNamespaces: stringsOf(b["excludedNamespaces"]), excludedLabels: stringMap(b["excludedLabels"])}
		if slices.Contains(c.excludedNamespaces, p.name) {
			if found == nil {
				found = &c // in the class, but every name probed so far is excluded
			}
			continue
		}
		d, err := set.Inject(ctx, &policy.Input{
			Operation: policy.OpCreate,
			Object:    map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": map[string]any{"name": "probe"}},
			Namespace: policy.Namespace{Name: p.name, Labels: p.labels},
		})
		if err != nil {
			return class{}, false, err
		}
		enabled, _ := b["enabled"].([]any)
		if d.Inject != (len(enabled) == 1 && (len(d.Tolerations) > 0 || d.PriorityClassName != "")) {
			return class{}, false, fmt.Errorf("inject decision %+v for class %q disagrees with its settings (enabled %v)", d, want, len(enabled) == 1)
		}
		if d.Inject {
			c.inject = true
			c.tolerations = withoutCovered(d.Tolerations)
			c.priorityClassName = d.PriorityClassName
		}
		return c, true, nil
	}
	if found != nil {
		return *found, true, nil // reachable only by excluded names: injects nothing
	}
	return class{}, false, nil
}

// stringsOf returns the strings of a Rego array (other values can never equal a namespace name).
func stringsOf(v any) []string {
	list, _ := v.([]any)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// stringMap returns a Rego object of strings, or nil when it is empty or holds a non-string
// value: lib.labels[k] == v never holds for a non-string v, so such a selector matches nothing.
func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		s, ok := x.(string)
		if !ok {
			return nil
		}
		out[k] = s
	}
	return out
}

// namespaceClasses reads parameters.namespaceClasses as lib.matching_classes does.
func namespaceClasses(params map[string]any) []matcher {
	list, _ := params["namespaceClasses"].([]any)
	var out []matcher
	for _, x := range list {
		entry, ok := x.(map[string]any)
		if !ok {
			continue
		}
		name, ok := entry["name"].(string)
		if !ok {
			continue
		}
		m := matcher{name: name, namespaces: stringsOf(entry["namespaces"])}
		if sel, ok := entry["matchLabels"].(map[string]any); ok {
			m.matchLabels = stringMap(sel)
		}
		out = append(out, m)
	}
	return out
}

// freshName is a namespace name no parameter mentions.
func freshName(params map[string]any) string {
	raw, _ := json.Marshal(params)
	name := "daemonguard-inprocess-probe"
	for i := 0; strings.Contains(string(raw), `"`+name+`"`); i++ {
		name = "daemonguard-inprocess-probe-" + strconv.Itoa(i)
	}
	return name
}

// withoutCovered drops the tolerations an earlier one covers: the webhook never appends those
// (covering is transitive, so the rest are appended exactly when the template does not cover them).
func withoutCovered(ts []corev1.Toleration) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range ts {
		if !slices.ContainsFunc(out, func(h corev1.Toleration) bool { return admission.Covers(h, t) }) {
			out = append(out, t)
		}
	}
	return out
}

// opOf is the toleration's operator as the API server reads it (Equal when left out).
func opOf(t corev1.Toleration) corev1.TolerationOperator {
	if t.Operator == "" {
		return corev1.TolerationOpEqual
	}
	return t.Operator
}

// build writes the policy and binding for derived classes.
func build(c *classes, o Options) *Objects {
	if o.FailurePolicy == "" {
		o.FailurePolicy = admissionregistrationv1.Fail
	}
	// The binding selects exactly what the DaemonSet mutating webhook selects (the URL only
	// fills the client configuration, which is not used).
	mutating, _ := webhook.Configurations(webhook.ConfigurationOptions{
		Name: o.Name, URL: "https://unused", Namespace: o.Namespace, ExemptNamespaces: o.ExemptNamespaces,
	})
	dsWebhook := mutating.Webhooks[0]
	typeMeta := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: kubesupport.MutatingAdmissionPolicyAPI, Kind: kind}
	}
	pol := &admissionregistrationv1.MutatingAdmissionPolicy{
		TypeMeta:   typeMeta("MutatingAdmissionPolicy"),
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: dsWebhook.Rules[0]}},
			},
			Variables:          variables(c),
			Mutations:          []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: patchExpression(c)}}},
			FailurePolicy:      ptr.To(o.FailurePolicy),
			ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		TypeMeta:   typeMeta("MutatingAdmissionPolicyBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: o.Name},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: o.Name,
			MatchResources: &admissionregistrationv1.MatchResources{
				NamespaceSelector: dsWebhook.NamespaceSelector,
				ObjectSelector:    dsWebhook.ObjectSelector,
			},
		},
	}
	return &Objects{Policy: pol, Binding: binding}
}

// variables are the policy's CEL variables.
func variables(c *classes) []admissionregistrationv1.Variable {
	field := func(f string) string { return orEmpty("h."+f, `""`) }
	return []admissionregistrationv1.Variable{
		{Name: "namespaceName", Expression: `namespaceObject.metadata.name`},
		{Name: "namespaceLabels", Expression: orEmpty("namespaceObject.metadata.labels", "{}")},
		{Name: "class", Expression: classExpression(c)},
		{Name: "labels", Expression: orEmpty("object.metadata.labels", "{}")},
		{Name: "annotations", Expression: orEmpty("object.metadata.annotations", "{}")},
		{Name: "oldAnnotations", Expression: `oldObject == null ? {} : ` + orEmpty("oldObject.metadata.annotations", "{}")},
		{Name: "optedOut", Expression: q(admission.OptOutAnnotation) + ` in variables.annotations && variables.annotations[` + q(admission.OptOutAnnotation) + `] == "false"`},
		// The rollout controller reporting progress: the webhook leaves such updates alone (no
		// injection behind the user's back), by the same rule.
		{Name: "statusOnly", Expression: admission.StatusOnlyUpdateCEL},
		// The template's tolerations as string maps (string() everywhere: the API server's CEL
		// wants homogeneous literals and types the fields dyn): absent fields "", the operator "Equal" when
		// left out (as the API server reads it), tolerationSeconds in decimal.
		// spec.template.spec is always there: a DaemonSet decodes into structs never omitted.
		{Name: "tolerations", Expression: `has(object.spec.template.spec.tolerations) ? object.spec.template.spec.tolerations.map(h, {` +
			`"key": string(` + field("key") + `), "operator": string(` + field("operator") + ` == "" ? "Equal" : h.operator), "value": string(` + field("value") +
			`), "effect": string(` + field("effect") + `), "seconds": has(h.tolerationSeconds) ? string(h.tolerationSeconds) : ""}) : []`},
	}
}

// classExpression names the namespace's class: the first matching entry, else "default".
func classExpression(c *classes) string {
	var b strings.Builder
	for _, m := range c.matchers {
		if _, reachable := c.byName[m.name]; !reachable {
			continue
		}
		var conds []string
		if len(m.namespaces) > 0 {
			conds = append(conds, "variables.namespaceName in "+qList(m.namespaces))
		}
		if m.matchLabels != nil {
			conds = append(conds, labelsMatch("variables.namespaceLabels", m.matchLabels))
		}
		if len(conds) == 0 {
			continue
		}
		fmt.Fprintf(&b, "(%s) ? %s :\n", strings.Join(conds, " || "), q(m.name))
	}
	b.WriteString(q("default"))
	return b.String()
}

// patchExpression is the JSONPatch mutation: per class, the tolerations the template does not
// cover and the priority class when it names none and sets no priority.
func patchExpression(c *classes) string {
	var b strings.Builder
	b.WriteString("variables.optedOut || variables.statusOnly ? [] :\n")
	// Classes that patch alike share one branch; the default class's patch is the last branch.
	def := classPatch(c.def)
	byPatch := map[string][]string{}
	for n, cl := range c.byName {
		if p := classPatch(cl); p != def {
			byPatch[p] = append(byPatch[p], n)
		}
	}
	patches := slices.SortedFunc(maps.Keys(byPatch), func(a, b string) int {
		return strings.Compare(slices.Min(byPatch[a]), slices.Min(byPatch[b]))
	})
	for _, p := range patches {
		names := slices.Sorted(slices.Values(byPatch[p]))
		fmt.Fprintf(&b, "variables.class in %s ? %s :\n", qList(names), p)
	}
	b.WriteString(def)
	return b.String()
}

func classPatch(c class) string {
	if !c.inject {
		return "[]"
	}
	var excluded []string
	if len(c.excludedNamespaces) > 0 {
		excluded = append(excluded, "variables.namespaceName in "+qList(c.excludedNamespaces))
	}
	if c.excludedLabels != nil {
		excluded = append(excluded, labelsMatch("variables.labels", c.excludedLabels))
	}
	var parts []string
	if len(c.tolerations) > 0 {
		// No list yet: add all of them at once, as plain maps (a list of typed values breaks the
		// API server's conversion). A list: append each missing one as a single typed value.
		// The API server's CEL wants homogeneous literals: with a tolerationSeconds (an int)
		// among the strings, every value of every map is dyn.
		dyn := slices.ContainsFunc(c.tolerations, func(t corev1.Toleration) bool { return t.TolerationSeconds != nil })
		var literals, appends []string
		for _, t := range c.tolerations {
			literals = append(literals, tolerationCEL(t, "{", "}", true, dyn))
			appends = append(appends, fmt.Sprintf("(variables.tolerations.exists(h, %s) ? [] : [JSONPatch{op: \"add\", path: \"/spec/template/spec/tolerations/-\", value: %s}])",
				coveredCEL(t), tolerationCEL(t, "Object.spec.template.spec.tolerations{", "}", false, false)))
		}
		parts = append(parts, fmt.Sprintf("(!has(object.spec.template.spec.tolerations) ? [JSONPatch{op: \"add\", path: \"/spec/template/spec/tolerations\", value: [%s]}] :\n  %s)",
			strings.Join(literals, ", "), strings.Join(appends, " +\n  ")))
	}
	if c.priorityClassName != "" {
		parts = append(parts, fmt.Sprintf(`(`+orEmpty("object.spec.template.spec.priorityClassName", `""`)+` == "" && !has(object.spec.template.spec.priority) ? [JSONPatch{op: "add", path: "/spec/template/spec/priorityClassName", value: %s}] : [])`,
			q(c.priorityClassName)))
	}
	patch := strings.Join(parts, " +\n")
	if len(excluded) == 0 {
		return "(" + patch + ")"
	}
	return fmt.Sprintf("(%s ? [] :\n%s)", strings.Join(excluded, " || "), patch)
}

// coveredCEL is admission.Covers(h, t) in CEL over an entry h of variables.tolerations.
func coveredCEL(t corev1.Toleration) string {
	exists := `h.operator == "Exists" && (h.key == "" || h.key == ` + q(t.Key) + `) && (h.effect == "" || h.effect == ` + q(string(t.Effect)) + `)`
	if opOf(t) == corev1.TolerationOpExists {
		return exists // an identical toleration is an Exists toleration for the same key and effect
	}
	seconds := ""
	if t.TolerationSeconds != nil {
		seconds = strconv.FormatInt(*t.TolerationSeconds, 10)
	}
	return `(` + exists + `) || (h.operator == ` + q(string(opOf(t))) + ` && h.key == ` + q(t.Key) + ` && h.value == ` + q(t.Value) +
		` && h.effect == ` + q(string(t.Effect)) + ` && h.seconds == ` + q(seconds) + `)`
}

// tolerationCEL writes a toleration as the API server stores it (empty fields left out), as a
// map literal (quoted keys, values wrapped in dyn() when dyn) or a typed object literal.
func tolerationCEL(t corev1.Toleration, open, close string, quoteKeys, dyn bool) string {
	var fields []string
	add := func(k, v string) {
		if quoteKeys {
			k = q(k)
		}
		if dyn {
			v = "dyn(" + v + ")"
		}
		fields = append(fields, k+": "+v)
	}
	if t.Key != "" {
		add("key", q(t.Key))
	}
	if t.Operator != "" {
		add("operator", q(string(t.Operator)))
	}
	if t.Value != "" {
		add("value", q(t.Value))
	}
	if t.Effect != "" {
		add("effect", q(string(t.Effect)))
	}
	if t.TolerationSeconds != nil {
		add("tolerationSeconds", strconv.FormatInt(*t.TolerationSeconds, 10))
	}
	return open + strings.Join(fields, ", ") + close
}

// labelsMatch is CEL for "labels include every pair of sel".
func labelsMatch(labels string, sel map[string]string) string {
	var conds []string
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		conds = append(conds, fmt.Sprintf("%s in %s && %s[%s] == %s", q(k), labels, labels, q(k), q(sel[k])))
	}
	return "(" + strings.Join(conds, " && ") + ")"
}

// orEmpty is CEL for the field at path, or empty when it is absent. (Optional field selection,
// x.?f.orValue(...), proved unreliable on the API server's typed objects.)
func orEmpty(path, empty string) string {
	return "(has(" + path + ") ? " + path + " : " + empty + ")"
}

// q quotes a string as a CEL string literal (Go's escapes are a subset of CEL's).
func q(s string) string { return strconv.Quote(s) }

func qList(ss []string) string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = q(s)
	}
	return "[" + strings.Join(out, ", ") + "]"
}
