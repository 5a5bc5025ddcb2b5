package admission

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// child returns obj[key] as an object, or nil when the key is absent or null. It fails when the key
// holds something that is not an object: such input is malformed and must not be overwritten.
func child(obj map[string]any, key string) (map[string]any, error) {
	v, ok := obj[key]
	if !ok || v == nil {
		return nil, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is %T, want an object", key, v)
	}
	return m, nil
}

// DaemonSetPatch returns the JSON patch that applies an inject decision to a raw DaemonSet:
// missing tolerations are appended to spec.template.spec.tolerations and the priority class is set
// when the template names none. Nothing the user wrote is removed or reordered, and applying the
// result again yields an empty patch (Argo CD re-applies manifests on every sync; a non-empty
// second patch would mint a new ControllerRevision each time).
func DaemonSetPatch(raw []byte, d policy.InjectDecision) ([]jsonpatch.Operation, error) {
	if !d.Inject {
		return nil, nil
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return nil, err
	}
	return daemonSetPatch(obj, d)
}

// Paths of the pod template and its fields, as JSON pointers.
const (
	podSpecPointer           = "/spec/template/spec"
	tolerationsPointer       = podSpecPointer + "/tolerations"
	priorityClassNamePointer = podSpecPointer + "/priorityClassName"
)

// daemonSetPatch is DaemonSetPatch over the decoded object, which it does not modify. The patch is
// written, not diffed: only additions can come out of an injection, and it knows where they go.
// Each operation is an "add" of a new key or list item, or a "replace" of a key that holds null or
// "" (a JSON patch "add" would do the same; "replace" says what happens).
func daemonSetPatch(obj map[string]any, d policy.InjectDecision) ([]jsonpatch.Operation, error) {
	if !d.Inject {
		return nil, nil
	}
	// Find the pod spec, or the first level of spec.template.spec that is missing (absent or null).
	levels := []struct{ key, pointer, prefix string }{
		{"spec", "/spec", ""},
		{"template", "/spec/template", "spec."},
		{"spec", podSpecPointer, "spec.template."},
	}
	missing := -1 // index into levels of the first missing level
	parent := obj
	for i, l := range levels {
		m, err := child(parent, l.key)
		if err != nil {
			return nil, fmt.Errorf("%s%w", l.prefix, err)
		}
		if m == nil {
			missing = i
			break
		}
		parent = m
	}
	var podSpec map[string]any // nil when missing
	if missing < 0 {
		podSpec = parent
	}

	existing, err := existingTolerations(podSpec)
	if err != nil {
		return nil, err
	}
	var added []any
	have := existing
	for _, w := range d.Tolerations {
		if covered(have, w) {
			continue
		}
		have = append(have, w)
		added = append(added, tolerationJSON(w))
	}
	setClass := needsPriorityClass(podSpec, d.PriorityClassName)
	if len(added) == 0 && !setClass {
		return nil, nil
	}

	if missing >= 0 {
		// Create the missing part of spec.template.spec with everything in it, in one operation.
		sub := map[string]any{}
		if len(added) > 0 {
			sub["tolerations"] = added
		}
		if setClass {
			sub["priorityClassName"] = d.PriorityClassName
		}
		value := sub
		for i := len(levels) - 1; i > missing; i-- {
			value = map[string]any{levels[i].key: value}
		}
		return []jsonpatch.Operation{addOrReplace(parent, levels[missing].key, levels[missing].pointer, value)}, nil
	}

	var ops []jsonpatch.Operation
	switch {
	case len(added) == 0:
	case len(existing) == 0 && !isList(podSpec["tolerations"]):
		ops = append(ops, addOrReplace(podSpec, "tolerations", tolerationsPointer, added))
	default:
		for i, t := range added {
			ops = append(ops, jsonpatch.NewOperation("add", tolerationsPointer+"/"+strconv.Itoa(len(existing)+i), t))
		}
	}
	if setClass {
		ops = append(ops, addOrReplace(podSpec, "priorityClassName", priorityClassNamePointer, d.PriorityClassName))
	}
	return ops, nil
}

func isList(v any) bool {
	_, ok := v.([]any)
	return ok
}

// addOrReplace sets obj[key] (at pointer): "add" when the key is absent, else "replace".
func addOrReplace(obj map[string]any, key, pointer string, value any) jsonpatch.Operation {
	if _, ok := obj[key]; ok {
		return jsonpatch.NewOperation("replace", pointer, value)
	}
	return jsonpatch.NewOperation("add", pointer, value)
}

// existingTolerations reads spec.template.spec.tolerations of a decoded pod spec (nil: none).
func existingTolerations(podSpec map[string]any) ([]corev1.Toleration, error) {
	v, ok := podSpec["tolerations"]
	if !ok || v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("spec.template.spec.tolerations is %T, want a list", v)
	}
	have := make([]corev1.Toleration, 0, len(list)+2)
	for _, item := range list {
		t, err := tolerationOf(item)
		if err != nil {
			return nil, fmt.Errorf("spec.template.spec.tolerations: %w", err)
		}
		have = append(have, t)
	}
	return have, nil
}

// tolerationOf converts one decoded toleration as json.Unmarshal into a corev1.Toleration does.
func tolerationOf(item any) (corev1.Toleration, error) {
	var t corev1.Toleration
	b, err := json.Marshal(item)
	if err != nil {
		return t, err
	}
	err = json.Unmarshal(b, &t)
	return t, err
}

// covered reports whether the tolerations already tolerate everything w tolerates.
func covered(have []corev1.Toleration, w corev1.Toleration) bool {
	return slices.ContainsFunc(have, func(h corev1.Toleration) bool { return Covers(h, w) })
}

// Covers reports whether toleration h tolerates everything w tolerates: h is identical to w, or
// an Exists toleration for the same key (or every key) with the same or any effect. The inject
// patch appends only tolerations the template does not cover, and the in-process policy's
// generator bakes the same rule into CEL.
func Covers(h, w corev1.Toleration) bool {
	hOp, wOp := operator(h), operator(w)
	effectOK := h.Effect == "" || h.Effect == w.Effect
	switch {
	case hOp == corev1.TolerationOpExists && (h.Key == "" || h.Key == w.Key) && effectOK:
		return true
	case hOp == wOp && h.Key == w.Key && h.Value == w.Value && h.Effect == w.Effect:
		return ptr.Equal(h.TolerationSeconds, w.TolerationSeconds)
	}
	return false
}

// operator is the toleration's operator as the API server reads it (Equal when left out).
func operator(t corev1.Toleration) corev1.TolerationOperator {
	if t.Operator == "" {
		return corev1.TolerationOpEqual
	}
	return t.Operator
}

// tolerationJSON renders a toleration the way the API server stores it (omitempty fields left out),
// so the stored template and a re-applied manifest compare equal.
func tolerationJSON(t corev1.Toleration) map[string]any {
	m := map[string]any{}
	if t.Key != "" {
		m["key"] = t.Key
	}
	if t.Operator != "" {
		m["operator"] = string(t.Operator)
	}
	if t.Value != "" {
		m["value"] = t.Value
	}
	if t.Effect != "" {
		m["effect"] = string(t.Effect)
	}
	if t.TolerationSeconds != nil {
		m["tolerationSeconds"] = json.Number(fmt.Sprint(*t.TolerationSeconds))
	}
	return m
}

// needsPriorityClass tells whether to set the class: only when the template names none and carries
// no explicit priority, since the Priority admission plugin rejects pods whose priority disagrees
// with their class.
func needsPriorityClass(podSpec map[string]any, class string) bool {
	if class == "" {
		return false
	}
	if v, ok := podSpec["priorityClassName"].(string); ok && v != "" {
		return false
	}
	if v, ok := podSpec["priority"]; ok && v != nil {
		return false
	}
	return true
}
