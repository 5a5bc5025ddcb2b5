package admission

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
// only narrow it further and are kept. An affinity that does not decode as the API types (a value
// of the wrong type on the way) holds no pin.
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
		if f.Key == nodeNameField && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
			return true, f.Values[0]
		}
	}
	return false, ""
}
