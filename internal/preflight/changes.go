package preflight

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// maxTemplateChanges bounds the paths listed: a rewritten template names its first ones.
const maxTemplateChanges = 20

// templateChanges lists the paths, below spec.template, where after differs from live: a field
// set, changed or removed, a list that changed length, or the differing elements of one that did
// not. Both come from the API server's (after: merged with) live object, so defaults match.
func templateChanges(live, after *corev1.PodTemplateSpec) []string {
	var a, b any
	if toGeneric(live, &a) != nil || toGeneric(after, &b) != nil {
		return []string{"spec.template"}
	}
	var out []string
	diffPaths("spec.template", a, b, &out)
	sort.Strings(out)
	if len(out) > maxTemplateChanges {
		out = append(out[:maxTemplateChanges], fmt.Sprintf("and %d more", len(out)-maxTemplateChanges))
	}
	return out
}

func toGeneric(v any, out *any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

func diffPaths(path string, a, b any, out *[]string) {
	if reflect.DeepEqual(a, b) {
		return
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		for k, av := range am {
			diffPaths(path+"."+k, av, bm[k], out)
		}
		for k, bv := range bm {
			if _, ok := am[k]; !ok {
				diffPaths(path+"."+k, nil, bv, out)
			}
		}
		return
	}
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok && bok && len(al) == len(bl) {
		for i := range al {
			diffPaths(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], out)
		}
		return
	}
	*out = append(*out, path)
}
