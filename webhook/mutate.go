// Package webhook holds daemonguard's admission logic as pure functions over the raw request
// object — what to patch, warn about and deny — and the thin controller-runtime handlers that
// adapt them to AdmissionReviews. Patches are computed from the raw bytes as received, so fields
// unknown to this build's k8s.io/api survive mutation untouched.
package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/daemonguard/daemonguard/internal/policy"
)

// decodeObject decodes raw JSON into a generic object, keeping numbers exact (json.Number), so
// re-encoding changes nothing but what we change.
func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("decode object: not a JSON object")
	}
	return obj, nil
}

// child returns obj[key] as an object, creating it when create is set. It fails when the key holds
// something that is not an object: such input is malformed and must not be overwritten.
func child(obj map[string]any, key string, create bool) (map[string]any, error) {
	v, ok := obj[key]
	if !ok || v == nil {
		if !create {
			return nil, nil
		}
		m := map[string]any{}
		obj[key] = m
		return m, nil
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
	spec, err := child(obj, "spec", true)
	if err != nil {
		return nil, err
	}
	template, err := child(spec, "template", true)
	if err != nil {
		return nil, fmt.Errorf("spec.%w", err)
	}
	podSpec, err := child(template, "spec", true)
	if err != nil {
		return nil, fmt.Errorf("spec.template.%w", err)
	}
	if err := addTolerations(podSpec, d.Tolerations); err != nil {
		return nil, err
	}
	addPriorityClass(podSpec, d.PriorityClassName)

	mutated, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode mutated object: %w", err)
	}
	return jsonpatch.CreatePatch(raw, mutated)
}

func addTolerations(podSpec map[string]any, wanted []corev1.Toleration) error {
	var existing []any
	if v, ok := podSpec["tolerations"]; ok && v != nil {
		list, ok := v.([]any)
		if !ok {
			return fmt.Errorf("spec.template.spec.tolerations is %T, want a list", v)
		}
		existing = list
	}
	have := make([]corev1.Toleration, 0, len(existing))
	for _, item := range existing {
		b, err := json.Marshal(item)
		if err != nil {
			return err
		}
		var t corev1.Toleration
		if err := json.Unmarshal(b, &t); err != nil {
			return fmt.Errorf("spec.template.spec.tolerations: %w", err)
		}
		have = append(have, t)
	}
	added := existing
	for _, w := range wanted {
		if covered(have, w) {
			continue
		}
		have = append(have, w)
		added = append(added, tolerationJSON(w))
	}
	if len(added) != len(existing) {
		podSpec["tolerations"] = added
	}
	return nil
}

// covered reports whether the tolerations already tolerate everything w tolerates: an identical
// toleration, or an Exists toleration for the same key (or every key) with the same or any effect.
func covered(have []corev1.Toleration, w corev1.Toleration) bool {
	wOp := w.Operator
	if wOp == "" {
		wOp = corev1.TolerationOpEqual
	}
	for _, h := range have {
		hOp := h.Operator
		if hOp == "" {
			hOp = corev1.TolerationOpEqual
		}
		effectOK := h.Effect == "" || h.Effect == w.Effect
		switch {
		case hOp == corev1.TolerationOpExists && h.Key == "" && effectOK:
			return true
		case hOp == corev1.TolerationOpExists && h.Key == w.Key && effectOK:
			return true
		case hOp == wOp && h.Key == w.Key && h.Value == w.Value && h.Effect == w.Effect && sameSeconds(h.TolerationSeconds, w.TolerationSeconds):
			return true
		}
	}
	return false
}

func sameSeconds(a, b *int64) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
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

// addPriorityClass sets the class only when the template names none and carries no explicit
// priority: the Priority admission plugin rejects pods whose priority disagrees with their class.
func addPriorityClass(podSpec map[string]any, class string) {
	if class == "" {
		return
	}
	if v, ok := podSpec["priorityClassName"].(string); ok && v != "" {
		return
	}
	if v, ok := podSpec["priority"]; ok && v != nil {
		return
	}
	podSpec["priorityClassName"] = class
}
