package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"

	"github.com/daemonguard/daemonguard/internal/genericjson"
)

// nodeNameField is the field the DaemonSet controller pins its pods with. Unlike the
// kubernetes.io/hostname label it always equals the node's name.
const nodeNameField = "metadata.name"

// PinResult says what PodPinPatch did and why.
type PinResult struct {
	Patch  []jsonpatch.Operation
	Reason string
}

// PodPinPatch makes sure a pod owned by a DaemonSet reaches the scheduler pinned to exactly one
// node by a required node affinity term `matchFields metadata.name In [node]`:
//   - a pod that already carries that pin (the DaemonSet controller writes it) gets no patch;
//   - a pod created with spec.nodeName (older controllers, hand-made pods) has the name moved into
//     the pin and spec.nodeName removed, so scheduling, priority and preemption go through the
//     default scheduler instead of bypassing it;
//   - pods not controlled by a DaemonSet, and DaemonSet pods without a node, are left alone.
//
// Only the required terms are rewritten, as the DaemonSet controller itself does; preferred terms
// and everything else survive.
func PodPinPatch(raw []byte) (PinResult, error) {
	return podPinPatch(raw, false)
}

// podPinPatch is PodPinPatch; validJSON promises that raw is valid JSON (controller-runtime has
// decoded the AdmissionReview it came in), which lets it skip most of the pod unread.
func podPinPatch(raw []byte, validJSON bool) (PinResult, error) {
	var obj map[string]any
	ok := false
	if validJSON {
		obj, ok = podViewOfValidJSON(raw)
	}
	if !ok {
		obj, ok = podView(raw)
	}
	if !ok {
		var err error
		if obj, err = decodeObject(raw); err != nil {
			return PinResult{}, err
		}
	}
	if !controlledByDaemonSet(obj) {
		return PinResult{Reason: "not controlled by a DaemonSet"}, nil
	}
	spec, err := child(obj, "spec")
	if err != nil {
		return PinResult{}, err
	}
	if spec == nil {
		return PinResult{}, fmt.Errorf("pod has no spec")
	}
	nodeName, _ := spec["nodeName"].(string)
	if pinned, node := pinnedNode(spec); pinned {
		if nodeName == "" || nodeName == node {
			return PinResult{Reason: "already pinned to " + node}, nil
		}
		return PinResult{}, fmt.Errorf("spec.nodeName %q contradicts the node affinity pin to %q", nodeName, node)
	}
	if nodeName == "" {
		return PinResult{Reason: "DaemonSet pod without a node pin or nodeName; left to the scheduler"}, nil
	}

	ops, err := pinOps(spec, nodeName)
	if err != nil {
		return PinResult{}, err
	}
	return PinResult{Patch: ops, Reason: "spec.nodeName " + nodeName + " rewritten into a node affinity pin"}, nil
}

// pinOps writes the patch that moves nodeName into the required node affinity of spec: the pin
// replaces spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution (creating
// affinity and nodeAffinity when absent or null), and spec.nodeName is removed. Nothing else in
// spec changes.
func pinOps(spec map[string]any, nodeName string) ([]jsonpatch.Operation, error) {
	pin := map[string]any{
		"nodeSelectorTerms": []any{map[string]any{
			"matchFields": []any{map[string]any{"key": nodeNameField, "operator": "In", "values": []any{nodeName}}},
		}},
	}
	const (
		affinityPointer     = "/spec/affinity"
		nodeAffinityPointer = affinityPointer + "/nodeAffinity"
		requiredPointer     = nodeAffinityPointer + "/requiredDuringSchedulingIgnoredDuringExecution"
	)
	remove := jsonpatch.NewOperation("remove", "/spec/nodeName", nil)
	affinity, err := child(spec, "affinity")
	if err != nil {
		return nil, fmt.Errorf("spec.%w", err)
	}
	if affinity == nil {
		value := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": pin}}
		return []jsonpatch.Operation{addOrReplace(spec, "affinity", affinityPointer, value), remove}, nil
	}
	nodeAffinity, err := child(affinity, "nodeAffinity")
	if err != nil {
		return nil, fmt.Errorf("spec.affinity.%w", err)
	}
	if nodeAffinity == nil {
		value := map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": pin}
		return []jsonpatch.Operation{addOrReplace(affinity, "nodeAffinity", nodeAffinityPointer, value), remove}, nil
	}
	return []jsonpatch.Operation{addOrReplace(nodeAffinity, "requiredDuringSchedulingIgnoredDuringExecution", requiredPointer, pin), remove}, nil
}

// podView decodes only what PodPinPatch reads of a pod: metadata.ownerReferences, spec.nodeName
// and spec.affinity, into the same shape decodeObject gives them (the other keys of metadata and
// spec are left out, and everything else at the top). The rest of the pod (containers, volumes,
// managedFields: most of it) is only scanned, not built. ok is false when raw does not decode into
// an object; decodeObject then gives the error.
func podView(raw []byte) (map[string]any, bool) {
	var top map[string]json.RawMessage
	if decodeValue(raw, &top) != nil || top == nil {
		return nil, false
	}
	obj := map[string]any{}
	for key, keep := range map[string][]string{"metadata": {"ownerReferences"}, "spec": {"nodeName", "affinity"}} {
		if v, ok := top[key]; ok {
			value, err := partialObject(v, keep)
			if err != nil {
				return nil, false
			}
			obj[key] = value
		}
	}
	return obj, true
}

// podViewOfValidJSON is podView for raw known to be valid JSON: it finds the few values it decodes
// by scanning for string and bracket boundaries only (see objectFields), which is several times
// cheaper than json.Decoder, and gives up (ok false) on anything unusual.
func podViewOfValidJSON(raw []byte) (map[string]any, bool) {
	top, ok := objectFields(raw, true, "metadata", "spec")
	if !ok {
		return nil, false
	}
	obj := map[string]any{}
	for i, keep := range [][]string{{"ownerReferences"}, {"nodeName", "affinity"}} {
		v := top[i]
		if v == nil {
			continue
		}
		key := [...]string{"metadata", "spec"}[i]
		if v[0] != '{' {
			whole, err := genericjson.DecodeValue(v)
			if err != nil {
				return nil, false
			}
			obj[key] = whole
			continue
		}
		fields, ok := objectFields(v, false, keep...)
		if !ok {
			return nil, false
		}
		m := make(map[string]any, len(keep))
		for j, f := range fields {
			if f == nil {
				continue
			}
			x, err := genericjson.DecodeValue(f)
			if err != nil {
				return nil, false
			}
			m[keep[j]] = x
		}
		obj[key] = m
	}
	return obj, true
}

// objectFields returns the raw values of keys in the JSON object b (nil where absent; the last one
// where a key repeats, as decoding into a map keeps). ok is false when b is not an object, or a key
// holds an escape (it could spell one of keys), or, with whole, when anything but white space
// follows the object. b must be valid JSON: nested values are skipped, not checked.
func objectFields(b []byte, whole bool, keys ...string) ([][]byte, bool) {
	found := make([][]byte, len(keys))
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				return nil, false
			}
			end, escaped := stringEnd(b, i)
			if end < 0 || escaped {
				return nil, false
			}
			key := b[i+1 : end-1]
			i = skipSpace(b, end)
			if i >= len(b) || b[i] != ':' {
				return nil, false
			}
			i = skipSpace(b, i+1)
			start := i
			if i = skipValue(b, i); i < 0 || i == start {
				return nil, false
			}
			for k, want := range keys {
				if string(key) == want {
					found[k] = b[start:i]
				}
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return nil, false
			}
			if b[i] == ',' {
				i = skipSpace(b, i+1)
				continue
			}
			if b[i] != '}' {
				return nil, false
			}
			i++
			break
		}
	}
	if whole && skipSpace(b, i) != len(b) {
		return nil, false
	}
	return found, true
}

// partialObject decodes raw, keeping only the keys keep when it is an object; any other value is
// decoded whole.
func partialObject(raw json.RawMessage, keep []string) (any, error) {
	var fields map[string]json.RawMessage
	if decodeValue(raw, &fields) != nil || fields == nil {
		var whole any
		return whole, decodeValue(raw, &whole)
	}
	out := make(map[string]any, len(keep))
	for _, k := range keep {
		if v, ok := fields[k]; ok {
			var x any
			if err := decodeValue(v, &x); err != nil {
				return nil, err
			}
			out[k] = x
		}
	}
	return out, nil
}

// decodeValue decodes the first JSON value of raw as decodeObject does (numbers as json.Number).
func decodeValue(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}

func controlledByDaemonSet(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	refs, _ := meta["ownerReferences"].([]any)
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		if c, _ := ref["controller"].(bool); !c {
			continue
		}
		gv, _ := ref["apiVersion"].(string)
		kind, _ := ref["kind"].(string)
		return kind == "DaemonSet" && (gv == "apps/v1" || gv == "extensions/v1beta1" || gv == "apps/v1beta2")
	}
	return false
}

// pinnedNode reports whether the required node affinity pins the pod to one node by name: exactly
// one term, whose matchFields include metadata.name In [one value]. Other requirements in the term
// only narrow it further and are kept. It reads the decoded spec as json.Unmarshal into
// corev1.Affinity would: null counts as absent, and a value of the wrong type anywhere on the
// way means no pin.
func pinnedNode(spec map[string]any) (bool, string) {
	nodeAffinity, ok := objectAt(spec, "affinity", "nodeAffinity")
	if !ok {
		return false, ""
	}
	required, ok := objectAt(nodeAffinity, "requiredDuringSchedulingIgnoredDuringExecution")
	if !ok {
		return false, ""
	}
	terms, ok := listAt(required, "nodeSelectorTerms")
	if !ok || len(terms) != 1 {
		return false, ""
	}
	term, ok := terms[0].(map[string]any)
	if !ok && terms[0] != nil {
		return false, ""
	}
	fields, ok := listAt(term, "matchFields")
	if !ok {
		return false, ""
	}
	node, pinned := "", false
	for _, f := range fields {
		req, ok := f.(map[string]any)
		if !ok && f != nil {
			return false, ""
		}
		key, ok1 := stringAt(req, "key")
		op, ok2 := stringAt(req, "operator")
		values, ok3 := listAt(req, "values")
		if !ok1 || !ok2 || !ok3 {
			return false, ""
		}
		for _, v := range values {
			if _, ok := v.(string); !ok && v != nil {
				return false, ""
			}
		}
		if !pinned && key == nodeNameField && op == "In" && len(values) == 1 {
			node, _ = values[0].(string)
			pinned = true
		}
	}
	return pinned, node
}

// objectAt follows keys through nested objects. ok is false when a value on the way is neither an
// object nor null; an absent or null value yields (nil, true) only for the last key, and ends the
// walk with ok false before it (nothing to pin).
func objectAt(obj map[string]any, keys ...string) (map[string]any, bool) {
	for _, k := range keys {
		v := obj[k]
		if v == nil {
			return nil, false
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		obj = m
	}
	return obj, true
}

func listAt(obj map[string]any, key string) ([]any, bool) {
	v := obj[key]
	if v == nil {
		return nil, true
	}
	l, ok := v.([]any)
	return l, ok
}

func stringAt(obj map[string]any, key string) (string, bool) {
	v := obj[key]
	if v == nil {
		return "", true
	}
	s, ok := v.(string)
	return s, ok
}
