package policy

// A native Go evaluator of the built-in policies (policies/lib, policies/inject and the four
// validation policies). The Rego is the specification: for every input this file answers (ok
// true), the answer is the one OPA gives, message bytes included; where that is not certain it
// declines (ok false) and the caller evaluates the policy with Rego. native_test.go checks it
// against OPA on hand-written, random and fuzzed inputs.
//
// Assumptions:
//   - values are what ast.InterfaceToValue converts as the input document and the parameters:
//     nil, bool, string, float64, int, int64, json.Number, []any and map[string]any. Anything
//     that makes the conversion fail or OPA panic (another Go type, NaN, a json.Number that is
//     not JSON or has a huge exponent) declines, wherever it is: see convertible;
//   - a Rego number is its text (ast.Number): strconv.FormatFloat(f, 'g', -1, 64) for a float64
//     (1000000.0 is "1e+06"), the decimal for an int, the literal for a json.Number. sprintf's %v
//     formats it as topdown's builtinSprintf does (sprintfNumber), lib.quote of a composite value
//     as ast.Value.String does (appendValue);
//   - OPA memoizes function calls by the value of their arguments, so a message may show an
//     equal value written elsewhere: a message that shows a number is only answered when the
//     numbers are written canonically (see canonical);
//   - comparisons are exact for integers up to 2^53 and for non-integers against integers (see
//     number); anything else that would need a comparison, is_integer or arithmetic declines.
//     lib.duration_ns with a fraction is replayed with topdown's big.Float arithmetic.
//
// Invariants: a native is immutable after newNative, so one value serves concurrent requests;
// everything that depends only on the parameters (namespace classes, per-class parameters, the
// inject settings and decision of each class) is computed there.

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
)

// nativePolicyNames lists the validation policies native implements (package names under
// data.daemonguard.policies).
var nativePolicyNames = []string{"on_delete_managed", "revision_history", "rolling_update_budget", "rollout_annotations"}

// native evaluates the built-in policies for one parameters document. Safe for concurrent use,
// immutable after construction.
type native struct {
	// declineAll is set when the parameters hold a value native does not mirror.
	declineAll bool
	classes    []nsClass
	byName     map[string]*classSettings
	fallback   *classSettings // the class "default"
}

// nsClass is one usable entry of parameters.namespaceClasses (an object with a string name).
type nsClass struct {
	namespaces []string          // the string entries of `namespaces`
	selector   map[string]string // `matchLabels` when non-empty and all its values are strings
	settings   *classSettings
}

// classSettings is everything the policies derive from the parameters for one namespace class.
type classSettings struct {
	quoted string // the class name as sprintf's %q prints it

	budget      budgetParams
	history     historyParams
	annotations annotationParams
	inject      injectPlan
}

type budgetParams struct {
	declined   bool
	hasPercent bool
	maxPercent number // maxUnavailablePercent, when a number
	percentV   string // maxPercent as %v prints it
}

type historyParams struct {
	declined                   bool
	hasMin, hasMax, hasReady   bool
	minLimit, maxLimit, ready  number
	minV, maxV, readyV, orZero string // as %v prints them; orZero is min_ready_or_zero
	rangeText                  string
}

type annotationParams struct {
	declined bool
	// minNs is the smallest duration_ns a progress deadline may have, clamped to
	// [-1, maxDurationNs+1] (durations are never negative and never above maxDurationNs when valid).
	minNs         int64
	deadlineKnown string // known["daemonguard.io/progress-deadline"]
}

// injectPlan is the inject policy's settings for one class, with its decisions prepared.
type injectPlan struct {
	declined       bool // object.union of the settings is not certain
	disabledReason string
	excluded       []string // the string entries of excludedNamespaces
	excludedLabels map[string]any
	labelsReason   string // "" when excludedLabels cannot be printed exactly
	labelsNumber   bool   // the reason shows a number (see canonical)
	nothing        bool   // no tolerations and no priority class: nothing to inject
	decisionOK     bool   // false when the decision's JSON round trip would fail or is not certain
	decision       InjectDecision
}

const (
	rolloutPrefix    = "daemonguard.io/"
	rolloutKey       = "daemonguard.io/rollout"
	exemptKey        = "daemonguard.io/on-delete-exempt"
	stepsKey         = "daemonguard.io/steps"
	deadlineKey      = "daemonguard.io/progress-deadline"
	injectOptOutKey  = "daemonguard.io/inject"
	maxDurationNs    = 31536000000000000
	maxExactInteger  = 1 << 53
	defaultClassName = "default"
)

// newNative prepares the evaluation of the built-in policies with params as
// data.daemonguard.parameters.
func newNative(params map[string]any) *native {
	n := &native{byName: map[string]*classSettings{}}
	// Parameters pass through the same memoized functions as the object (see canonical).
	if !convertibleValue(params) || !canonicalValue(params) {
		n.declineAll = true
		return n
	}
	settings := func(name string) *classSettings {
		if s, ok := n.byName[name]; ok {
			return s
		}
		s := newClassSettings(params, name)
		n.byName[name] = s
		return s
	}
	n.fallback = settings(defaultClassName)
	entries, _ := params["namespaceClasses"].([]any)
	for _, entry := range entries {
		class, ok := entry.(map[string]any)
		if !ok {
			continue
		}
		name, ok := class["name"].(string)
		if !ok {
			continue
		}
		c := nsClass{settings: settings(name)}
		namespaces, _ := class["namespaces"].([]any)
		for _, ns := range namespaces {
			if s, ok := ns.(string); ok {
				c.namespaces = append(c.namespaces, s)
			}
		}
		if selector, _ := class["matchLabels"].(map[string]any); len(selector) > 0 {
			strs := make(map[string]string, len(selector))
			for k, v := range selector {
				s, ok := v.(string)
				if !ok {
					// namespace labels are strings: this pair never matches, nor does the selector.
					strs = nil
					break
				}
				strs[k] = s
			}
			c.selector = strs
		}
		if len(c.namespaces) > 0 || len(c.selector) > 0 {
			n.classes = append(n.classes, c)
		}
	}
	return n
}

// class is lib.namespace_class: the first class whose namespaces list the input's namespace or
// whose non-empty matchLabels the namespace's labels include; "default" otherwise.
func (n *native) class(ns *Namespace) *classSettings {
	for i := range n.classes {
		c := &n.classes[i]
		if slices.Contains(c.namespaces, ns.Name) {
			return c.settings
		}
		if len(c.selector) > 0 && includesLabels(ns.Labels, c.selector) {
			return c.settings
		}
	}
	return n.fallback
}

func includesLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if l, ok := labels[k]; !ok || l != v {
			return false
		}
	}
	return true
}

func newClassSettings(params map[string]any, name string) *classSettings {
	c := &classSettings{quoted: strconv.Quote(name)}

	if p, ok := policyParams(params, "rolling_update_budget", name); !ok {
		c.budget.declined = true
	} else if v, ok := paramNumber(p, "maxUnavailablePercent"); ok {
		c.budget.hasPercent, c.budget.maxPercent, c.budget.percentV = true, v, v.sprintfV()
		c.budget.declined = !v.comparable()
	}

	h := &c.history
	if p, ok := policyParams(params, "revision_history", name); !ok {
		h.declined = true
	} else {
		h.minLimit, h.hasMin = paramNumber(p, "minRevisionHistoryLimit")
		h.maxLimit, h.hasMax = paramNumber(p, "maxRevisionHistoryLimit")
		h.ready, h.hasReady = paramNumber(p, "minReadySeconds")
		h.orZero = "0"
		for _, b := range []struct {
			has bool
			n   number
			v   *string
		}{{h.hasMin, h.minLimit, &h.minV}, {h.hasMax, h.maxLimit, &h.maxV}, {h.hasReady, h.ready, &h.readyV}} {
			if b.has {
				*b.v = b.n.sprintfV()
				h.declined = h.declined || !b.n.comparable()
			}
		}
		if h.hasReady {
			h.orZero = h.readyV
		}
		switch {
		case h.hasMin && h.hasMax:
			h.rangeText = "an integer from " + h.minV + " to " + h.maxV
		case h.hasMin:
			h.rangeText = "an integer of at least " + h.minV
		case h.hasMax:
			h.rangeText = "an integer of at most " + h.maxV
		default:
			h.rangeText = "any non-negative integer"
		}
	}

	a := &c.annotations
	if p, ok := policyParams(params, "rollout_annotations", name); !ok {
		a.declined = true
	} else {
		minText := "30"
		if v, ok := paramNumber(p, "minProgressDeadlineSeconds"); ok {
			minText = v.text()
			a.declined = v.class == nInvalid
		}
		if !a.declined {
			a.deadlineKnown = `a Go duration from ` + sprintfNumber(minText) + `s to 8760h (e.g. "10m", "1h30m")`
			// ns >= min_progress_deadline * 1000000000, compared exactly as NumberCompare does.
			threshold, ok := new(big.Rat).SetString(regoMul(minText, "1000000000"))
			if !ok {
				a.declined = true
			} else {
				a.minNs = clampNs(ratCeil(threshold))
			}
		}
	}

	c.inject = newInjectPlan(params, name)
	return c
}

// policyParams is lib.params(policy) for a class: object.union of parameters.policies[policy]
// .default and of the class's entry.
func policyParams(params map[string]any, policy, class string) (map[string]any, bool) {
	entry := func(class string) map[string]any {
		policies, _ := params["policies"].(map[string]any)
		byClass, _ := policies[policy].(map[string]any)
		p, _ := byClass[class].(map[string]any)
		return p
	}
	return objectUnion(entry(defaultClassName), entry(class))
}

// paramNumber is lib.param_number: p[key] when it is a number.
func paramNumber(p map[string]any, key string) (number, bool) {
	v, ok := p[key]
	if !ok || kindOf(v) != kNumber {
		return number{}, false
	}
	return toNumber(v), true
}

func newInjectPlan(params map[string]any, class string) injectPlan {
	var p injectPlan
	base, _ := params["inject"].(map[string]any)
	classes, _ := base["namespaceClasses"].(map[string]any)
	override, _ := classes[class].(map[string]any)
	settings, ok := objectUnion(base, override)
	if !ok {
		return injectPlan{declined: true}
	}
	if enabled, ok := settings["enabled"].(bool); ok && !enabled {
		p.disabledReason = "injection is disabled (inject.enabled: false) for namespace class " + strconv.Quote(class)
	}
	priorityClass, _ := settings["priorityClassName"].(string)
	excluded, _ := settings["excludedNamespaces"].([]any)
	for _, ns := range excluded {
		if s, ok := ns.(string); ok {
			p.excluded = append(p.excluded, s)
		}
	}
	if labels, _ := settings["excludedLabels"].(map[string]any); len(labels) > 0 {
		p.excludedLabels = labels
		if text, ok := appendValue(nil, labels); ok {
			p.labelsReason = "the DaemonSet's labels match inject.excludedLabels " + string(text)
		}
		p.labelsNumber = hasNumber(labels)
	}
	list, _ := settings["tolerations"].([]any)
	tolerations := []corev1.Toleration{}
	p.decisionOK = utf8.ValidString(priorityClass)
	for _, t := range list {
		obj, ok := t.(map[string]any)
		if !ok {
			continue
		}
		tol, ok := decodeToleration(obj)
		p.decisionOK = p.decisionOK && ok
		tolerations = append(tolerations, tol)
	}
	p.nothing = len(tolerations) == 0 && priorityClass == ""
	p.decision = InjectDecision{Inject: true, Tolerations: tolerations, PriorityClassName: priorityClass}
	return p
}

// decodeToleration is what Set.Inject's JSON round trip makes of one toleration object; false
// when the round trip would fail (unknown field, wrong type, a tolerationSeconds that is not an
// int64 literal) or is not certain (field names in another case, invalid UTF-8).
func decodeToleration(obj map[string]any) (corev1.Toleration, bool) {
	var t corev1.Toleration
	for k, v := range obj {
		switch k {
		case "key", "operator", "value", "effect", "tolerationSeconds":
		default:
			// Unknown to the strict decoding, whatever the value, null included.
			return t, false
		}
		if k == "tolerationSeconds" {
			if v == nil {
				continue
			}
			if kindOf(v) != kNumber {
				return t, false
			}
			n := toNumber(v)
			if n.class == nInvalid {
				return t, false
			}
			secs, err := strconv.ParseInt(n.text(), 10, 64)
			if err != nil {
				return t, false
			}
			t.TolerationSeconds = &secs
			continue
		}
		var s string
		switch x := v.(type) {
		case nil:
			continue
		case string:
			if !utf8.ValidString(x) {
				return t, false
			}
			s = x
		default:
			return t, false
		}
		switch k {
		case "key":
			t.Key = s
		case "operator":
			t.Operator = corev1.TolerationOperator(s)
		case "value":
			t.Value = s
		case "effect":
			t.Effect = corev1.TaintEffect(s)
		default:
			return t, false
		}
	}
	return t, true
}

// --- values ---------------------------------------------------------------------------------

// kind is the Rego type of a Go value as ast.InterfaceToValue converts it.
type kind uint8

const (
	kOdd kind = iota // a Go type native does not mirror
	kNull
	kBool
	kNumber
	kString
	kArray
	kObject
)

func kindOf(v any) kind {
	switch v.(type) {
	case nil:
		return kNull
	case bool:
		return kBool
	case string:
		return kString
	case json.Number, float64, int, int64:
		return kNumber
	case []any:
		return kArray
	case map[string]any:
		return kObject
	}
	return kOdd
}

// convertible reports whether the input document converts to Rego without error and with
// nothing OPA fails or panics on when it evaluates it: only the Go types native mirrors, no
// json.Number that is not JSON or that ast.NumberChecked could reject, no NaN or infinity.
// metadata.managedFields is skipped, as Input.value leaves it out. It holds for anything an
// encoding/json decoder produces but numbers with exponents beyond 10^±25000 or so.
func convertible(in *Input) bool {
	return convertibleObject(in.Object) && convertibleObject(in.OldObject)
}

func convertibleObject(obj map[string]any) bool {
	if meta, ok := obj["metadata"].(map[string]any); ok && meta["managedFields"] != nil {
		for k, v := range obj {
			if k != "metadata" && !convertibleValue(v) {
				return false
			}
		}
		for k, v := range meta {
			if k != "managedFields" && !convertibleValue(v) {
				return false
			}
		}
		return true
	}
	return convertibleValue(obj)
}

func convertibleValue(v any) bool {
	switch x := v.(type) {
	case string, bool, nil, int, int64:
		return true
	case map[string]any:
		for _, e := range x {
			if !convertibleValue(e) {
				return false
			}
		}
		return true
	case []any:
		return !slices.ContainsFunc(x, func(e any) bool { return !convertibleValue(e) })
	case json.Number:
		return jsonNumberOK(string(x))
	case float64:
		return !math.IsNaN(x) && !math.IsInf(x, 0)
	}
	return false
}

// jsonNumberOK reports whether s is a JSON number that ast.NumberChecked certainly accepts.
func jsonNumberOK(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	for j := i; j < len(s); j++ {
		if c := s[j]; c < '0' || c > '9' {
			_, _, _, _, ok := splitJSONNumber(s)
			return ok && numberChecks(s)
		}
	}
	// An integer literal: digits, no leading zero.
	return i < len(s) && (s[i] != '0' || len(s) == i+1)
}

// canonical reports whether every number of the object's metadata and spec is written in the
// canonical form of its value: an integer literal other than -0, or the shortest decimal of a
// fractional float64 (strconv.FormatFloat(f, 'g', -1, 64)). Native checks it before printing a
// number into a message, because OPA memoizes function calls by the value of their arguments:
// lib.quote(0) after lib.quote(-0.0) is "-0", lib.as_object of an object returns an earlier
// equal object, whose numbers may be written differently ("1e+06" and "1000000"). The library
// passes only metadata, spec and the parameters (checked by newNative) through such functions.
func canonical(obj map[string]any) bool {
	for _, k := range [...]string{"metadata", "spec"} {
		if meta, ok := obj[k].(map[string]any); ok && k == "metadata" {
			for mk, mv := range meta {
				if mk != "managedFields" && !canonicalValue(mv) {
					return false
				}
			}
			continue
		}
		if !canonicalValue(obj[k]) {
			return false
		}
	}
	return true
}

// canonicalValue is canonical for a value that convertibleValue accepts.
func canonicalValue(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			if !canonicalValue(e) {
				return false
			}
		}
	case []any:
		return !slices.ContainsFunc(x, func(e any) bool { return !canonicalValue(e) })
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			return s != "-0"
		}
		f, err := strconv.ParseFloat(s, 64)
		return err == nil && f != math.Trunc(f) && strconv.FormatFloat(f, 'g', -1, 64) == s
	case float64:
		// An integral float64 is printed as an integer below 1e6 ("1e+06" above).
		return x != math.Trunc(x) || (math.Abs(x) < 1e6 && !(x == 0 && math.Signbit(x)))
	}
	return true
}

// numberChecks reports whether ast.NumberChecked certainly accepts s: only a number with an
// exponent can fail, and only one whose digits and exponent are large (smallExponent in ast).
// This and regoAtoi64 restate OPA internals of the version in go.mod; after an OPA upgrade the
// differential tests (native_test.go) are what shows whether they still hold.
func numberChecks(s string) bool {
	i := strings.IndexAny(s, "eE")
	if i < 0 {
		return true
	}
	exp, err := strconv.Atoi(s[i+1:])
	return err == nil && i+max(exp, -exp) <= 25000
}

// numClass says what native can do with a number.
type numClass uint8

const (
	// nInvalid: NaN or an infinity; native declines.
	nInvalid numClass = iota
	// nUnsure: a valid number native does not compare: an integer beyond ±2^53 (whose
	// is_integer depends on big.Float rounding), or one not written as an integer literal.
	nUnsure
	// nInt: an integer within ±2^53, in i; is_integer holds and comparisons are exact.
	nInt
	// nFrac: a non-integer; f is a float64 on the same side of every integer as the number, so
	// comparisons with integers are exact; is_integer does not hold.
	nFrac
)

// number is a Rego number: its source (whose text is the ast.Number) and what is known of its
// value.
type number struct {
	src   any // json.Number, float64, int, int64, or the text of a computed number (string)
	class numClass
	i     int64
	f     float64
}

// toNumber classifies a number; the number keeps v as its source (boxing it anew would allocate).
func toNumber(v any) number {
	switch x := v.(type) {
	case json.Number:
		return numberFromText(v, string(x))
	case float64:
		n := number{src: v}
		switch {
		case math.IsNaN(x) || math.IsInf(x, 0):
			n.class = nInvalid
		case x != math.Trunc(x):
			n.class, n.f = nFrac, x
		case math.Abs(x) <= maxExactInteger:
			n.class, n.i = nInt, int64(x)
		default:
			n.class = nUnsure
		}
		return n
	case int:
		return intNumber(v, int64(x))
	case int64:
		return intNumber(v, x)
	}
	return number{}
}

func intNumber(src any, i int64) number {
	if i < -maxExactInteger || i > maxExactInteger {
		return number{src: src, class: nUnsure}
	}
	return number{src: src, class: nInt, i: i}
}

// numberFromText classifies a number's text, src being what text() returns it from. An integer
// is only recognised as an integer literal, the canonical form (see convertible).
func numberFromText(src any, s string) number {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return intNumber(src, i)
		}
		return number{src: src, class: nUnsure}
	}
	// The nearest float64 f of a decimal d lies on the same side of every integer k as d (k is
	// a float64 itself when |k| <= 2^53, and would otherwise be nearer to d than f), so when f
	// is not an integer neither is d, and f orders against integers as d does.
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f == math.Trunc(f) {
		return number{src: src, class: nUnsure}
	}
	return number{src: src, class: nFrac, f: f}
}

// splitJSONNumber splits a JSON number -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? into its
// parts (exp keeps its sign); ok is false for anything else.
func splitJSONNumber(s string) (neg bool, whole, frac, exp string, ok bool) {
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	i := digitRun(s)
	if i == 0 || (i > 1 && s[0] == '0') {
		return false, "", "", "", false
	}
	whole, s = s[:i], s[i:]
	if strings.HasPrefix(s, ".") {
		j := digitRun(s[1:])
		if j == 0 {
			return false, "", "", "", false
		}
		frac, s = s[1:1+j], s[1+j:]
	}
	if s != "" {
		if s[0] != 'e' && s[0] != 'E' {
			return false, "", "", "", false
		}
		s = s[1:]
		sign := ""
		if s != "" && (s[0] == '+' || s[0] == '-') {
			sign, s = s[:1], s[1:]
		}
		j := digitRun(s)
		if j == 0 || j != len(s) {
			return false, "", "", "", false
		}
		exp = sign + s
	}
	return neg, whole, frac, exp, true
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

func (n number) text() string {
	switch x := n.src.(type) {
	case json.Number:
		return string(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	}
	return ""
}

// sprintfV is the number as sprintf's %v prints it.
func (n number) sprintfV() string {
	switch n.src.(type) {
	case int, int64:
		return n.text()
	}
	return sprintfNumber(n.text())
}

// comparable reports whether cmpInt can order the number against an integer.
func (n number) comparable() bool { return n.class == nInt || n.class == nFrac }

// cmpInt compares the integer i (|i| <= 2^53) with n; n must be comparable.
func cmpInt(i int64, n number) int {
	if n.class == nInt {
		switch {
		case i < n.i:
			return -1
		case i > n.i:
			return 1
		}
		return 0
	}
	if float64(i) < n.f {
		return -1
	}
	return 1
}

// sprintfNumber formats a number's text as topdown's builtinSprintf does for %v: a text with a
// fraction or an exponent as the float64 it parses to (fmt's %v of a float64), else as the
// integer.
func sprintfNumber(s string) string {
	if strings.ContainsAny(s, ".eE") {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return fmt.Sprint(f)
		}
		return s
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	if b, ok := new(big.Int).SetString(s, 10); ok {
		return b.String()
	}
	return s
}

// appendValue appends v as ast.Value.String prints it (strings quoted by strconv.Quote, numbers
// as their text, object keys sorted); false when that is not certain.
func appendValue(b []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(b, "null"...), true
	case bool:
		return strconv.AppendBool(b, x), true
	case string:
		return strconv.AppendQuote(b, x), true
	case json.Number, float64, int, int64:
		n := toNumber(x)
		if n.class == nInvalid {
			return b, false
		}
		return append(b, n.text()...), true
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ", "...)
			}
			var ok bool
			if b, ok = appendValue(b, e); !ok {
				return b, false
			}
		}
		return append(b, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = strconv.AppendQuote(b, k)
			b = append(b, ": "...)
			var ok bool
			if b, ok = appendValue(b, x[k]); !ok {
				return b, false
			}
		}
		return append(b, '}'), true
	}
	return b, false
}

// regoEqual is Rego's == on two values; sure is false when native cannot tell.
func regoEqual(a, b any) (equal, sure bool) {
	ka, kb := kindOf(a), kindOf(b)
	if ka == kOdd || kb == kOdd {
		return false, false
	}
	if ka != kb {
		return false, true
	}
	switch ka {
	case kNull:
		return true, true
	case kBool:
		return a.(bool) == b.(bool), true
	case kString:
		return a.(string) == b.(string), true
	case kNumber:
		return numbersEqual(toNumber(a), toNumber(b))
	case kArray:
		x, y := a.([]any), b.([]any)
		if len(x) != len(y) {
			return false, true
		}
		sure := true
		for i := range x {
			eq, ok := regoEqual(x[i], y[i])
			if ok && !eq {
				return false, true
			}
			sure = sure && ok
		}
		return sure, sure
	default:
		x, y := a.(map[string]any), b.(map[string]any)
		if len(x) != len(y) {
			return false, true
		}
		sure := true
		for k, xv := range x {
			yv, ok := y[k]
			if !ok {
				return false, true
			}
			eq, ok := regoEqual(xv, yv)
			if ok && !eq {
				return false, true
			}
			sure = sure && ok
		}
		return sure, sure
	}
}

func numbersEqual(a, b number) (equal, sure bool) {
	if a.class == nInvalid || b.class == nInvalid {
		return false, false
	}
	if a.text() == b.text() {
		return true, true
	}
	switch {
	case a.class == nInt && b.class == nInt:
		return a.i == b.i, true
	case a.class == nInt && b.class == nFrac, a.class == nFrac && b.class == nInt:
		return false, true
	case a.class == nFrac && b.class == nFrac:
		x, okx := new(big.Rat).SetString(a.text())
		y, oky := new(big.Rat).SetString(b.text())
		return okx && oky && x.Cmp(y) == 0, okx && oky
	}
	return false, false
}

// objectUnion is object.union(a, b): a when b is empty or equal to a, b when a is empty, else
// a merged with b (nested objects merged, b winning any other conflict, as MergeParameters).
func objectUnion(a, b map[string]any) (map[string]any, bool) {
	if len(a) == 0 {
		return b, true
	}
	if len(b) == 0 {
		return a, true
	}
	eq, sure := regoEqual(a, b)
	if !sure {
		return nil, false
	}
	if eq {
		return a, true
	}
	return MergeParameters(a, b), true
}

// --- evaluation -----------------------------------------------------------------------------

// evaluation collects one policy's violations; declined is set as soon as anything is uncertain.
type evaluation struct {
	policy   string
	class    *classSettings
	out      []Violation
	declined bool
	// printsNumber is set when a message shows a number: it is only certain for canonical
	// objects (see canonical).
	printsNumber bool
}

func (e *evaluation) add(field, msg string) {
	e.out = append(e.out, Violation{Policy: e.policy, Field: field, Message: msg})
}

// object is lib.as_object(lib.get(parent, key, {})); nil stands for {}.
func (e *evaluation) object(parent map[string]any, key string) map[string]any {
	v := parent[key]
	if o, ok := v.(map[string]any); ok {
		return o
	}
	if kindOf(v) == kOdd {
		e.declined = true
	}
	return nil
}

// array is lib.as_array(lib.get(parent, key, [])).
func (e *evaluation) array(parent map[string]any, key string) []any {
	v := parent[key]
	if a, ok := v.([]any); ok {
		return a
	}
	if kindOf(v) == kOdd {
		e.declined = true
	}
	return nil
}

// quote is lib.quote(v): a string as %q prints it, anything else as %v does.
func (e *evaluation) quote(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case json.Number, float64, int, int64:
		return e.sprintfV(x)
	}
	b, ok := appendValue(nil, v)
	if !ok {
		e.declined = true
	}
	e.printsNumber = e.printsNumber || hasNumber(v)
	return string(b)
}

// sprintfV is a number of the object as sprintf's %v prints it.
func (e *evaluation) sprintfV(v any) string {
	n := toNumber(v)
	if n.class == nInvalid {
		e.declined = true
		return ""
	}
	e.printsNumber = true
	return n.sprintfV()
}

func hasNumber(v any) bool {
	switch x := v.(type) {
	case json.Number, float64, int, int64:
		return true
	case []any:
		return slices.ContainsFunc(x, hasNumber)
	case map[string]any:
		for _, e := range x {
			if hasNumber(e) {
				return true
			}
		}
	}
	return false
}

// number returns v as a number when it is one.
func (e *evaluation) number(v any) (number, bool) {
	switch kindOf(v) {
	case kNumber:
		n := toNumber(v)
		if n.class == nInvalid {
			e.declined = true
		}
		return n, true
	case kOdd:
		e.declined = true
	}
	return number{}, false
}

// integer is lib.is_integer(v) (and the integer).
func (e *evaluation) integer(v any) (int64, bool) {
	n, ok := e.number(v)
	if !ok {
		return 0, false
	}
	switch n.class {
	case nInt:
		return n.i, true
	case nUnsure:
		e.declined = true
	}
	return 0, false
}

// valueOr is `v := obj[key]; v != null` else fallback; defaulted is `not lib.has_value(obj, key)`.
func valueOr(obj map[string]any, key string, fallback any) (v any, defaulted bool) {
	v, ok := obj[key]
	if !ok || v == nil {
		return fallback, true
	}
	return v, false
}

// strategyType is lib.strategy_type, and lib.strategy_type_defaulted.
func (e *evaluation) strategyType(spec map[string]any) (any, bool) {
	t, defaulted := valueOr(e.object(spec, "updateStrategy"), "type", "RollingUpdate")
	if kindOf(t) == kOdd {
		e.declined = true
	}
	return t, defaulted
}

func isString(v any, s string) bool {
	x, ok := v.(string)
	return ok && x == s
}

// validate returns the violations of every named policy, like violations (native_test.go) but
// checking the input once for all of them (the check walks the whole object); ok=false when any
// policy declines.
func (n *native) validate(policies []string, in *Input) (vs []Violation, ok bool) {
	if n.declineAll || !convertible(in) {
		return nil, false
	}
	for _, policy := range policies {
		pvs, ok := n.evaluate(policy, in)
		if !ok {
			return nil, false
		}
		vs = append(vs, pvs...)
	}
	return vs, true
}

// evaluate is violations without the check of the input.
func (n *native) evaluate(policy string, in *Input) (vs []Violation, ok bool) {
	e := evaluation{policy: policy, class: n.class(&in.Namespace)}
	switch c := e.class; policy {
	case "rolling_update_budget":
		if !c.budget.declined {
			e.rollingUpdateBudget(in)
		}
		e.declined = e.declined || c.budget.declined
	case "on_delete_managed":
		e.onDeleteManaged(in)
	case "revision_history":
		if !c.history.declined {
			e.revisionHistory(in)
		}
		e.declined = e.declined || c.history.declined
	case "rollout_annotations":
		if !c.annotations.declined {
			e.rolloutAnnotations(in)
		}
		e.declined = e.declined || c.annotations.declined
	default:
		return nil, false
	}
	if e.declined || (e.printsNumber && !canonical(in.Object)) {
		return nil, false
	}
	return dedupe(e.out), true
}

// dedupe drops repeated {field, msg} pairs: violation is a set.
func dedupe(vs []Violation) []Violation {
	if len(vs) < 2 {
		return vs
	}
	if len(vs) <= 8 {
		out := vs[:1]
		for _, v := range vs[1:] {
			if !slices.ContainsFunc(out, func(o Violation) bool { return o.Field == v.Field && o.Message == v.Message }) {
				out = append(out, v)
			}
		}
		return out
	}
	seen := make(map[[2]string]bool, len(vs))
	out := vs[:0]
	for _, v := range vs {
		k := [2]string{v.Field, v.Message}
		if !seen[k] {
			seen[k] = true
			out = append(out, v)
		}
	}
	return out
}

// --- rolling_update_budget ------------------------------------------------------------------

const (
	rollingUpdateField  = "spec.updateStrategy.rollingUpdate"
	maxUnavailableField = "spec.updateStrategy.rollingUpdate.maxUnavailable"
	maxSurgeField       = "spec.updateStrategy.rollingUpdate.maxSurge"
	budgetFormatHint    = `a non-negative integer (e.g. 1) or a percentage string "N%" with N from 0 to 100 (e.g. "10%")`
	defaultNote         = " (the default)"
)

// Defaults as the Rego literals 1, 0 and 10 convert.
var (
	numberOne  any = json.Number("1")
	numberZero any = json.Number("0")
	numberTen  any = json.Number("10")
)

// budget is lib.int_or_percent of a value: ok is false where it is undefined.
type budget struct {
	ok      bool
	percent bool
	value   int64
}

func (e *evaluation) intOrPercent(v any) budget {
	if s, ok := v.(string); ok {
		digits, found := strings.CutSuffix(s, "%")
		if !found || digits == "" || digitRun(digits) != len(digits) {
			return budget{}
		}
		digits = strings.TrimLeft(digits, "0")
		if len(digits) > 3 {
			return budget{}
		}
		value, _ := strconv.ParseInt("0"+digits, 10, 64)
		return budget{ok: value <= 100, percent: true, value: value}
	}
	i, ok := e.integer(v)
	return budget{ok: ok && i >= 0, value: i}
}

func (e *evaluation) rollingUpdateBudget(in *Input) {
	spec := e.object(in.Object, "spec")
	if t, _ := e.strategyType(spec); !isString(t, "RollingUpdate") {
		return
	}
	rolling := e.object(e.object(spec, "updateStrategy"), "rollingUpdate")
	unavailable, unavailableDefaulted := valueOr(rolling, "maxUnavailable", numberOne)
	surge, surgeDefaulted := valueOr(rolling, "maxSurge", numberZero)
	pu, ps := e.intOrPercent(unavailable), e.intOrPercent(surge)

	if !pu.ok {
		e.add(maxUnavailableField, "maxUnavailable "+e.quote(unavailable)+" is not valid: it must be "+budgetFormatHint)
	}
	if !ps.ok {
		e.add(maxSurgeField, "maxSurge "+e.quote(surge)+" is not valid: it must be "+budgetFormatHint)
	}
	if pu.ok && ps.ok && pu.value == 0 && ps.value == 0 {
		e.add(rollingUpdateField, "maxUnavailable "+e.quote(unavailable)+" and maxSurge "+e.quote(surge)+note(surgeDefaulted)+
			" are both zero, so no pod could ever be updated: set maxUnavailable to at least 1 (or maxSurge above 0 when no container uses a hostPort)")
	}
	if pu.ok && ps.ok && pu.value > 0 && ps.value > 0 {
		e.add(maxSurgeField, "maxSurge "+e.quote(surge)+" may not be set while maxUnavailable "+e.quote(unavailable)+note(unavailableDefaulted)+
			" is non-zero: exactly one of them must be non-zero; to surge, set maxUnavailable to 0")
	}
	if ps.ok && ps.value > 0 {
		if ports := e.hostPorts(e.object(e.object(spec, "template"), "spec")); len(ports) > 0 {
			e.add(maxSurgeField, "maxSurge "+e.quote(surge)+" must be 0 because the pod binds host ports ("+strings.Join(ports, ", ")+
				"): a surge pod can never start next to the old pod on the same node, so the rollout would hang; use maxSurge 0 and maxUnavailable of at least 1")
		}
	}

	p := &e.class.budget
	if !pu.ok || !p.hasPercent {
		return
	}
	if pu.percent {
		if cmpInt(pu.value, p.maxPercent) > 0 {
			e.add(maxUnavailableField, "maxUnavailable "+e.quote(unavailable)+" exceeds the allowed maximum of "+p.percentV+"% for namespace class "+
				e.class.quoted+" (allowed: 0% to "+p.percentV+"%, or an integer node count)")
		}
		return
	}
	if in.Cluster == nil || in.Cluster.MatchingNodes < 0 {
		return // lib.matching_nodes is undefined
	}
	allowed, ok := allowedNodes(int64(in.Cluster.MatchingNodes), p.maxPercent)
	if !ok {
		e.declined = true
		return
	}
	if pu.value > allowed {
		a := strconv.FormatInt(allowed, 10)
		e.add(maxUnavailableField, "maxUnavailable "+e.sprintfV(unavailable)+" exceeds the allowed maximum of "+a+" for namespace class "+e.class.quoted+
			": the DaemonSet runs on "+strconv.Itoa(in.Cluster.MatchingNodes)+" matching nodes and at most "+p.percentV+
			"% of them (at least 1) may be unavailable at once (allowed: 0 to "+a+", or a percentage up to "+p.percentV+"%)")
	}
}

// allowedNodes is max([1, floor((matching_nodes * max_percent) / 100)]). Rego divides through a
// 64-bit big.Float unless the quotient is a small integer; for products up to 2^60 in magnitude
// its rounding never crosses an integer, so the floor is the exact floor division below.
func allowedNodes(matching int64, maxPercent number) (int64, bool) {
	const limit = 1 << 60
	if maxPercent.class != nInt || matching > maxExactInteger {
		return 0, false
	}
	p := maxPercent.i
	if p != 0 && (matching > limit/abs(p)) {
		return 0, false
	}
	product := matching * p
	q := product / 100
	if product%100 != 0 && product < 0 {
		q--
	}
	return max(1, q), true
}

func abs(i int64) int64 { return max(i, -i) }

func note(defaulted bool) string {
	if defaulted {
		return defaultNote
	}
	return ""
}

// hostPorts is host_ports: "container <name> hostPort <port>" for each port bound on the host.
func (e *evaluation) hostPorts(podSpec map[string]any) []string {
	hostNetwork := podSpec["hostNetwork"]
	if kindOf(hostNetwork) == kOdd {
		e.declined = true
	}
	var ports []string
	for _, list := range [...]string{"initContainers", "containers"} {
		for _, c := range e.array(podSpec, list) {
			container, ok := c.(map[string]any)
			if !ok {
				continue
			}
			for _, p := range e.array(container, "ports") {
				port, ok := p.(map[string]any)
				if !ok {
					continue
				}
				v, bound := e.hostPort(port, hostNetwork == true)
				if !bound {
					continue
				}
				name, ok := container["name"]
				if !ok {
					name = ""
				}
				ports = append(ports, "container "+e.quote(name)+" hostPort "+e.sprintfV(v))
			}
		}
	}
	return ports
}

func (e *evaluation) hostPort(p map[string]any, hostNetwork bool) (any, bool) {
	if v, ok := p["hostPort"]; ok {
		if i, ok := e.integer(v); ok && i > 0 {
			return v, true
		}
	}
	if v, ok := p["containerPort"]; ok && hostNetwork {
		if i, ok := e.integer(v); ok && i > 0 {
			return v, true
		}
	}
	return nil, false
}

// --- on_delete_managed ----------------------------------------------------------------------

const (
	typeField          = "spec.updateStrategy.type"
	onDeleteUnmanaged  = `updateStrategy.type "OnDelete" is not managed by daemonguard: nothing will roll the pods out after a template change, they keep running the old revision until deleted by hand; add the annotation daemonguard.io/rollout: "managed" to let daemonguard's rollout controller roll them out, or daemonguard.io/on-delete-exempt: "<reason>" if manual replacement is intended`
	managedTypeMessage = ` is not allowed with the annotation daemonguard.io/rollout: "managed": the built-in DaemonSet controller would roll the pods itself and fight daemonguard's rollout controller; the only allowed type is "OnDelete"`
)

func (e *evaluation) annotations(obj map[string]any) map[string]any {
	return e.object(e.object(obj, "metadata"), "annotations")
}

func (e *evaluation) onDeleteManaged(in *Input) {
	annotations := e.annotations(in.Object)
	managed := isString(annotations[rolloutKey], "managed")
	reason, _ := annotations[exemptKey].(string)
	exempt := strings.TrimSpace(reason) != ""
	t, defaulted := e.strategyType(e.object(in.Object, "spec"))
	onDelete := isString(t, "OnDelete")
	if onDelete && !managed && !exempt {
		e.add(typeField, onDeleteUnmanaged)
	}
	if managed && !onDelete {
		e.add(typeField, "updateStrategy.type "+e.quote(t)+note(defaulted)+managedTypeMessage)
	}
}

// --- revision_history -----------------------------------------------------------------------

const (
	limitField = "spec.revisionHistoryLimit"
	readyField = "spec.minReadySeconds"
)

// nonNegativeInteger is non_negative_integer(v), with the number.
func (e *evaluation) nonNegativeInteger(v any) (int64, bool) {
	i, ok := e.integer(v)
	return i, ok && i >= 0
}

func (e *evaluation) revisionHistory(in *Input) {
	h := &e.class.history
	spec := e.object(in.Object, "spec")

	limit, limitDefaulted := valueOr(spec, "revisionHistoryLimit", numberTen)
	if i, ok := e.nonNegativeInteger(limit); !ok {
		e.add(limitField, "revisionHistoryLimit "+e.quote(limit)+" is not a non-negative integer (allowed: "+h.rangeText+")")
	} else {
		if h.hasMin && cmpInt(i, h.minLimit) < 0 {
			e.add(limitField, "revisionHistoryLimit "+e.quote(limit)+note(limitDefaulted)+" is below the allowed minimum of "+h.minV+
				" for namespace class "+e.class.quoted+" (allowed: "+h.rangeText+"): `kubectl rollout undo` needs old revisions to go back to")
		}
		if h.hasMax && cmpInt(i, h.maxLimit) > 0 {
			e.add(limitField, "revisionHistoryLimit "+e.quote(limit)+note(limitDefaulted)+" exceeds the allowed maximum of "+h.maxV+
				" for namespace class "+e.class.quoted+" (allowed: "+h.rangeText+"): every kept revision is a ControllerRevision object stored in etcd")
		}
	}

	ready, readyDefaulted := valueOr(spec, "minReadySeconds", numberZero)
	if i, ok := e.nonNegativeInteger(ready); !ok {
		e.add(readyField, "minReadySeconds "+e.quote(ready)+" is not a non-negative integer (allowed: an integer of at least "+h.orZero+")")
	} else if h.hasReady && cmpInt(i, h.ready) < 0 {
		e.add(readyField, "minReadySeconds "+e.quote(ready)+note(readyDefaulted)+" is below the allowed minimum of "+h.readyV+
			" for namespace class "+e.class.quoted+" (allowed: "+h.readyV+" or more): a new pod must stay ready that long before the rollout moves on to the next nodes")
	}
}

// --- rollout_annotations --------------------------------------------------------------------

// knownAnnotations is `known` but for the progress deadline, whose text depends on the class.
var knownAnnotations = map[string]string{
	rolloutKey:                       `"managed"`,
	"daemonguard.io/max-unavailable": `an integer node count from 1 (e.g. "2") or a percentage "N%" with N from 1 to 100 (e.g. "25%")`,
	stepsKey:                         `a comma-separated list of steps, each a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" (until resumed) or "pause:<duration>" (e.g. "pause:5m"), ending with "100%" (e.g. "1,pause:10m,25%,100%")`,
	"daemonguard.io/paused":          `"true" or "false"`,
	"daemonguard.io/resume":          `any non-empty token of at most 63 characters`,
	deadlineKey:                      "",
	"daemonguard.io/topology-key":    `a label key such as "topology.kubernetes.io/zone"`,
	exemptKey:                        `a non-empty reason`,
	injectOptOutKey:                  `"true" or "false"`,
}

// knownList is concat(", ", sort(object.keys(known))).
var knownList = func() string {
	keys := make([]string, 0, len(knownAnnotations))
	for k := range knownAnnotations {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}()

const stepHint = `each step must be a node count from 1 (e.g. "1"), a percentage "N%" with N from 1 to 100, "pause" or "pause:<duration>" with a Go duration up to 8760h (e.g. "pause:5m")`

var (
	dnsSubdomain  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	qualifiedName = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

func (e *evaluation) rolloutAnnotations(in *Input) {
	for key, value := range e.annotations(in.Object) {
		if !strings.HasPrefix(key, rolloutPrefix) {
			continue
		}
		field := "metadata.annotations[" + strconv.Quote(key) + "]"
		desc, known := knownAnnotations[key]
		if key == deadlineKey {
			desc = e.class.annotations.deadlineKnown
		}
		s, isString := value.(string)
		if !isString {
			e.add(field, "value "+e.quote(value)+" is not a string: annotation values are strings, quote it in YAML")
		}
		if !known {
			e.add(field, "unknown daemonguard annotation "+strconv.Quote(key)+" (a typo?); known annotations: "+knownList)
		}
		if !isString || !known {
			continue
		}
		if key == stepsKey {
			e.steps(field, s)
			continue
		}
		if !e.valid(key, s) {
			e.add(field, "value "+strconv.Quote(s)+" is not allowed: it must be "+desc)
		}
	}
}

// valid is valid(key, value) for a known key other than the steps.
func (e *evaluation) valid(key, value string) bool {
	switch key {
	case rolloutKey:
		return value == "managed"
	case "daemonguard.io/max-unavailable":
		s := parseStep(value)
		return s.kind == stepCount || s.kind == stepPercent
	case "daemonguard.io/paused", injectOptOutKey:
		return value == "true" || value == "false"
	case "daemonguard.io/resume":
		return value != "" && utf8.RuneCountInString(value) <= 63
	case deadlineKey:
		ns, ok := durationNs(value)
		return ok && ns >= e.class.annotations.minNs && ns <= maxDurationNs
	case "daemonguard.io/topology-key":
		return isQualifiedName(value)
	case exemptKey:
		return strings.TrimSpace(value) != ""
	}
	return false
}

// isQualifiedName is lib.is_qualified_name.
func isQualifiedName(s string) bool {
	parts := strings.Split(s, "/")
	switch len(parts) {
	case 1:
		return isQualifiedNamePart(parts[0])
	case 2:
		return utf8.RuneCountInString(parts[0]) <= 253 && dnsSubdomain.MatchString(parts[0]) && isQualifiedNamePart(parts[1])
	}
	return false
}

func isQualifiedNamePart(s string) bool {
	return utf8.RuneCountInString(s) <= 63 && qualifiedName.MatchString(s)
}

type stepKind uint8

const (
	stepInvalid stepKind = iota
	stepCount
	stepPercent
	stepPause
)

// step is parse_step(s); kind stepInvalid where it is undefined.
type step struct {
	kind  stepKind
	value int64
}

func parseStep(s string) step {
	switch {
	case s != "" && len(s) <= 9 && digitRun(s) == len(s):
		v, _ := strconv.ParseInt(s, 10, 64)
		if v >= 1 {
			return step{kind: stepCount, value: v}
		}
	case len(s) >= 2 && len(s) <= 4 && s[len(s)-1] == '%' && digitRun(s) == len(s)-1:
		v, _ := strconv.ParseInt(s[:len(s)-1], 10, 64)
		if v >= 1 && v <= 100 {
			return step{kind: stepPercent, value: v}
		}
	case s == "pause":
		return step{kind: stepPause}
	case strings.HasPrefix(s, "pause:"):
		if ns, ok := durationNs(s[len("pause:"):]); ok && ns > 0 && ns <= maxDurationNs {
			return step{kind: stepPause}
		}
	}
	return step{}
}

func (e *evaluation) steps(field, value string) {
	trimmed := strings.TrimSpace(value)
	quoted := strconv.Quote(value)
	if trimmed == "" {
		e.add(field, "value "+quoted+` is an empty list: list at least one step, ending with "100%" (e.g. "1,25%,100%")`)
	}
	raw := strings.Split(value, ",")
	steps := make([]string, len(raw))
	parsed := make([]step, len(raw))
	allValid := true
	for i, s := range raw {
		steps[i] = strings.TrimSpace(s)
		parsed[i] = parseStep(steps[i])
		if parsed[i].kind == stepInvalid {
			allValid = false
			if trimmed != "" {
				e.add(field, "step "+strconv.Itoa(i+1)+" "+strconv.Quote(steps[i])+" of "+quoted+" is not valid: "+stepHint)
			}
		}
	}
	// Count steps and percent steps must each be non-decreasing.
	for _, k := range [...]struct {
		kind stepKind
		name string
	}{{stepCount, "count"}, {stepPercent, "percent"}} {
		prev := -1
		for i, p := range parsed {
			if p.kind != k.kind {
				continue
			}
			if prev >= 0 && p.value < parsed[prev].value {
				e.add(field, "step "+strconv.Itoa(i+1)+" "+strconv.Quote(steps[i])+" of "+quoted+" is smaller than step "+
					strconv.Itoa(prev+1)+" "+strconv.Quote(steps[prev])+": "+k.name+" steps must not decrease")
			}
			prev = i
		}
	}
	if trimmed == "" || !allValid {
		return
	}
	endsAt100 := false
	for i := len(parsed) - 1; i >= 0; i-- {
		if parsed[i].kind != stepPause {
			endsAt100 = parsed[i].kind == stepPercent && parsed[i].value == 100
			break
		}
	}
	if !endsAt100 {
		e.add(field, "value "+quoted+` does not end with "100%": the rollout would never finish; make "100%" the last step that is not a pause (e.g. "`+
			strings.TrimRight(trimmed, ",")+`,100%")`)
	}
}

// --- durations ------------------------------------------------------------------------------

// durationUnits are the alternatives of lib.duration_regex's unit group, in its order (the
// regexp takes the first that matches), with their texts in lib.duration_unit_ns.
var durationUnits = [...]struct {
	unit string
	ns   int64
	text string
}{
	{"ns", 1, "1"}, {"us", 1e3, "1000"}, {"µs", 1e3, "1000"}, {"μs", 1e3, "1000"},
	{"ms", 1e6, "1000000"}, {"s", 1e9, "1000000000"}, {"m", 6e10, "60000000000"}, {"h", 36e11, "3600000000000"},
}

// durationNs is lib.duration_ns(s); ok is false where it is undefined. A duration above
// maxDurationNs is returned as maxDurationNs+1.
//
// The full match of lib.duration_regex splits s in one way only (a unit is followed by a digit
// or the end), which is also how regex.find_all_string_submatch_n splits it. Components without
// a fraction (or with only zeros in it) add up exactly in Rego; with a fraction, Rego computes
// through 64-bit big.Floats, which durationNsRego mirrors operation by operation.
func durationNs(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	const huge = 1 << 61 // sums stay below 2^62: no overflow
	var sum int64
	fractional := false
	for rest := s; rest != ""; {
		whole := digitRun(rest)
		if whole == 0 {
			return 0, false
		}
		digits := strings.TrimLeft(rest[:whole], "0")
		rest = rest[whole:]
		if strings.HasPrefix(rest, ".") {
			f := digitRun(rest[1:])
			if f == 0 {
				return 0, false
			}
			if strings.Trim(rest[1:1+f], "0") != "" {
				fractional = true
			}
			rest = rest[1+f:]
		}
		u := -1
		for i, unit := range durationUnits {
			if strings.HasPrefix(rest, unit.unit) {
				u = i
				break
			}
		}
		if u < 0 {
			return 0, false
		}
		rest = rest[len(durationUnits[u].unit):]
		if sum > huge || fractional {
			continue
		}
		if len(digits) > 18 {
			sum = huge + 1
			continue
		}
		v, _ := strconv.ParseInt("0"+digits, 10, 64)
		if v > huge/durationUnits[u].ns {
			sum = huge + 1
			continue
		}
		sum += v * durationUnits[u].ns
	}
	if fractional {
		return durationNsRego(s), true
	}
	if sum > maxDurationNs {
		sum = maxDurationNs + 1
	}
	return sum, true
}

// durationNsRego is round(sum(parts)) of lib.duration_ns for a string matching
// lib.duration_regex, computed on number texts with topdown's arithmetic (see regoArith).
func durationNsRego(s string) int64 {
	var parts []string
	for rest := s; rest != ""; {
		whole := digitRun(rest)
		digits := strings.TrimLeft(rest[:whole], "0")
		if digits == "" {
			digits = "0"
		}
		rest = rest[whole:]
		frac := "0"
		if strings.HasPrefix(rest, ".") {
			f := digitRun(rest[1:])
			frac = "0" + rest[:1+f]
			rest = rest[1+f:]
		}
		for _, unit := range durationUnits {
			if strings.HasPrefix(rest, unit.unit) {
				parts = append(parts, regoMul(regoPlus(digits, frac), unit.text))
				rest = rest[len(unit.unit):]
				break
			}
		}
	}
	ns, ok := new(big.Int).SetString(regoRound(regoSum(parts)), 10)
	if !ok || ns.Cmp(big.NewInt(maxDurationNs)) > 0 {
		return maxDurationNs + 1
	}
	return ns.Int64()
}

// clampNs clamps an integer to [-1, maxDurationNs+1].
func clampNs(i *big.Int) int64 {
	switch {
	case i.Sign() < 0:
		return -1
	case i.Cmp(big.NewInt(maxDurationNs)) > 0:
		return maxDurationNs + 1
	}
	return i.Int64()
}

func ratCeil(r *big.Rat) *big.Int {
	q, m := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// --- topdown's arithmetic on number texts ---------------------------------------------------

// regoArith is topdown's arithOp.eval on number texts: ints in the int32 window, then exact
// big.Ints when both are integers, then big.Floats of the default 64-bit mantissa.
func regoArith(x, y string, small func(a, b int64) int64, exact func(z, a, b *big.Int) *big.Int, float func(z, a, b *big.Float) *big.Float) string {
	if a, ok := regoSmallInt(x); ok {
		if b, ok := regoSmallInt(y); ok {
			return strconv.FormatInt(small(a, b), 10)
		}
	}
	if a, ok := regoNumberToInt(x); ok {
		if b, ok := regoNumberToInt(y); ok {
			return exact(new(big.Int), a, b).String()
		}
	}
	return regoFloatText(float(new(big.Float), regoNumberToFloat(x), regoNumberToFloat(y)))
}

func regoPlus(x, y string) string {
	return regoArith(x, y, func(a, b int64) int64 { return a + b }, (*big.Int).Add, (*big.Float).Add)
}

func regoMul(x, y string) string {
	return regoArith(x, y, func(a, b int64) int64 { return a * b }, (*big.Int).Mul, (*big.Float).Mul)
}

// regoSum is topdown's sum of an array of numbers.
func regoSum(xs []string) string {
	var sum int64
	fast := true
	for _, x := range xs {
		i, ok := regoAtoi64(x)
		if !ok || (i > 0 && sum > math.MaxInt64-i) || (i < 0 && sum < math.MinInt64-i) {
			fast = false
			break
		}
		sum += i
	}
	if fast {
		return strconv.FormatInt(sum, 10)
	}
	acc := new(big.Int)
	exact := true
	for _, x := range xs {
		i, ok := regoNumberToInt(x)
		if !ok {
			exact = false
			break
		}
		acc.Add(acc, i)
	}
	if exact {
		return acc.String()
	}
	fsum, tmp := new(big.Float), new(big.Float)
	for _, x := range xs {
		tmp.SetString(x)
		fsum.Add(fsum, tmp)
	}
	return regoFloatText(fsum)
}

// regoRound is topdown's round: half away from zero on a 64-bit big.Float.
func regoRound(x string) string {
	if i, ok := regoSmallInt(x); ok {
		return strconv.FormatInt(i, 10)
	}
	a := regoNumberToFloat(x)
	half := big.NewFloat(0.5)
	if a.Signbit() {
		a = new(big.Float).Sub(a, half)
	} else {
		a = new(big.Float).Add(a, half)
	}
	i, _ := a.Int(nil)
	return regoFloatText(new(big.Float).SetInt(i))
}

func regoSmallInt(s string) (int64, bool) {
	i, ok := regoAtoi64(s)
	return i, ok && i >= math.MinInt32 && i <= math.MaxInt32
}

// regoAtoi64 is OPA's util.Atoi64: an optionally signed run of at most 19 digits, optionally
// followed by a decimal point and zeros.
func regoAtoi64(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	negative := s[0] == '-'
	if negative || s[0] == '+' {
		s = s[1:]
	}
	if s == "" || len(s) > 19 {
		return 0, false
	}
	var n int64
	pastDecimal := false
	for _, ch := range []byte(s) {
		if ch == '.' {
			if pastDecimal {
				return 0, false
			}
			pastDecimal = true
			continue
		}
		ch -= '0'
		if pastDecimal {
			if ch == 0 {
				continue
			}
			return 0, false
		}
		if ch > 9 {
			return 0, false
		}
		n = n*10 + int64(ch)
	}
	if n < 0 {
		return 0, false
	}
	if negative {
		n = -n
	}
	return n, true
}

func regoNumberToInt(s string) (*big.Int, bool) {
	if i, ok := new(big.Int).SetString(s, 10); ok {
		return i, true
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || !r.IsInt() {
		return nil, false
	}
	return new(big.Int).Set(r.Num()), true
}

func regoNumberToFloat(s string) *big.Float {
	f, _ := new(big.Float).SetString(s)
	if f == nil {
		return new(big.Float)
	}
	return f
}

func regoFloatText(f *big.Float) string {
	if f.IsInt() {
		return f.Text('f', -1)
	}
	return f.Text('g', -1)
}

// --- inject ---------------------------------------------------------------------------------

const (
	optOutReason  = `the DaemonSet opts out with the annotation daemonguard.io/inject: "false"`
	nothingReason = "nothing to inject: inject.tolerations is empty and inject.priorityClassName is empty"
)

// inject returns the inject policy's decision as Set.Inject would after its JSON round trip;
// ok=false means "use Rego".
func (n *native) inject(in *Input) (d InjectDecision, ok bool) {
	if n.declineAll || !convertible(in) {
		return InjectDecision{}, false
	}
	p := &n.class(&in.Namespace).inject
	var e evaluation
	meta := e.object(in.Object, "metadata")
	optOut := isString(e.object(meta, "annotations")[injectOptOutKey], "false")
	switch {
	case e.declined:
		return InjectDecision{}, false
	case optOut:
		return InjectDecision{Reason: optOutReason}, true
	case p.declined:
		return InjectDecision{}, false
	case p.disabledReason != "":
		return InjectDecision{Reason: p.disabledReason}, true
	case slices.Contains(p.excluded, in.Namespace.Name):
		return InjectDecision{Reason: "namespace " + strconv.Quote(in.Namespace.Name) + " is in inject.excludedNamespaces"}, true
	}
	if len(p.excludedLabels) > 0 {
		labels := e.object(meta, "labels")
		match, sure := true, true
		for k, v := range p.excludedLabels {
			l, ok := labels[k]
			if !ok {
				match = false
				break
			}
			eq, ok := regoEqual(l, v)
			if ok && !eq {
				match = false
				break
			}
			sure = sure && ok
		}
		switch {
		case e.declined || (match && (!sure || p.labelsReason == "" || (p.labelsNumber && !canonical(in.Object)))):
			return InjectDecision{}, false
		case match:
			return InjectDecision{Reason: p.labelsReason}, true
		}
	}
	switch {
	case p.nothing:
		return InjectDecision{Reason: nothingReason}, true
	case !p.decisionOK:
		return InjectDecision{}, false
	}
	d = p.decision
	d.Tolerations = slices.Clone(d.Tolerations)
	for i, t := range d.Tolerations {
		if t.TolerationSeconds != nil {
			secs := *t.TolerationSeconds
			d.Tolerations[i].TolerationSeconds = &secs
		}
	}
	return d, true
}
