package webhook

import (
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
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
	spec, err := child(obj, "spec", false)
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

	affinity, err := child(spec, "affinity", true)
	if err != nil {
		return PinResult{}, fmt.Errorf("spec.%w", err)
	}
	nodeAffinity, err := child(affinity, "nodeAffinity", true)
	if err != nil {
		return PinResult{}, fmt.Errorf("spec.affinity.%w", err)
	}
	nodeAffinity["requiredDuringSchedulingIgnoredDuringExecution"] = map[string]any{
		"nodeSelectorTerms": []any{map[string]any{
			"matchFields": []any{map[string]any{"key": nodeNameField, "operator": "In", "values": []any{nodeName}}},
		}},
	}
	delete(spec, "nodeName")
	mutated, err := json.Marshal(obj)
	if err != nil {
		return PinResult{}, fmt.Errorf("encode mutated pod: %w", err)
	}
	patch, err := jsonpatch.CreatePatch(raw, mutated)
	if err != nil {
		return PinResult{}, err
	}
	return PinResult{Patch: patch, Reason: "spec.nodeName " + nodeName + " rewritten into a node affinity pin"}, nil
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
// only narrow it further and are kept.
func pinnedNode(spec map[string]any) (bool, string) {
	raw, err := json.Marshal(spec["affinity"])
	if err != nil {
		return false, ""
	}
	var affinity struct {
		NodeAffinity *struct {
			Required *struct {
				Terms []struct {
					MatchFields []corev1.NodeSelectorRequirement `json:"matchFields"`
				} `json:"nodeSelectorTerms"`
			} `json:"requiredDuringSchedulingIgnoredDuringExecution"`
		} `json:"nodeAffinity"`
	}
	if json.Unmarshal(raw, &affinity) != nil || affinity.NodeAffinity == nil || affinity.NodeAffinity.Required == nil {
		return false, ""
	}
	terms := affinity.NodeAffinity.Required.Terms
	if len(terms) != 1 {
		return false, ""
	}
	for _, f := range terms[0].MatchFields {
		if f.Key == nodeNameField && f.Operator == "In" && len(f.Values) == 1 {
			return true, f.Values[0]
		}
	}
	return false, ""
}
