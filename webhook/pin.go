package webhook

import (
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
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
	obj, err := decodeObject(raw)
	if err != nil {
		return PinResult{}, err
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
