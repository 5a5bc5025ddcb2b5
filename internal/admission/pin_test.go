package admission

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"gomodules.xyz/jsonpatch/v2"
)

const dsOwner = `"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"ds","uid":"u","controller":true}]`

func pinTerm(node string) string {
	return `{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["` + node + `"]}]}]}}}`
}

func TestPodPinPatch(t *testing.T) {
	tests := map[string]struct {
		pod         string // the raw pod
		wantPatch   bool
		wantPinned  string // node the result is pinned to; "" = not pinned
		wantErr     bool
		wantNoField string // a field that must be gone after the patch
	}{
		"the DaemonSet controller's own pin gets no patch": {
			pod:        `{"metadata":{` + dsOwner + `},"spec":{"affinity":` + pinTerm("n1") + `}}`,
			wantPinned: "n1",
		},
		"nodeName is moved into the pin": {
			pod:       `{"metadata":{` + dsOwner + `},"spec":{"nodeName":"n2","containers":[]}}`,
			wantPatch: true, wantPinned: "n2", wantNoField: "nodeName",
		},
		"preferred terms and other affinity survive the rewrite": {
			pod: `{"metadata":{` + dsOwner + `},"spec":{"nodeName":"n3","affinity":{"podAntiAffinity":{"x":1},"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1}],` +
				`"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"a","operator":"Exists"}]}]}}}}}`,
			wantPatch: true, wantPinned: "n3", wantNoField: "nodeName",
		},
		"a pin that agrees with nodeName is left alone": {
			pod:        `{"metadata":{` + dsOwner + `},"spec":{"nodeName":"n1","affinity":` + pinTerm("n1") + `}}`,
			wantPinned: "n1",
		},
		"a pin that contradicts nodeName is an error": {
			pod:     `{"metadata":{` + dsOwner + `},"spec":{"nodeName":"n2","affinity":` + pinTerm("n1") + `}}`,
			wantErr: true,
		},
		"a pod owned by a ReplicaSet is ignored": {
			pod: `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"r","uid":"u","controller":true}]},"spec":{"nodeName":"n1"}}`,
		},
		"a non-controller DaemonSet owner reference is ignored": {
			pod: `{"metadata":{"ownerReferences":[{"apiVersion":"apps/v1","kind":"DaemonSet","name":"d","uid":"u"}]},"spec":{"nodeName":"n1"}}`,
		},
		"a DaemonSet pod with neither pin nor node is left to the scheduler": {
			pod: `{"metadata":{` + dsOwner + `},"spec":{"containers":[]}}`,
		},
		"a DaemonSet pod without spec is an error": {pod: `{"metadata":{` + dsOwner + `}}`, wantErr: true},
		"truncated JSON is an error":               {pod: `{"metadata":{`, wantErr: true},
		"an affinity of the wrong type is an error": {
			pod: `{"metadata":{` + dsOwner + `},"spec":{"nodeName":"n1","affinity":"x"}}`, wantErr: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res, err := PodPinPatch([]byte(tc.pod))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("no error, result %+v", res)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantPatch != (len(res.Patch) > 0) {
				t.Fatalf("patch %v, want patch: %v (%s)", res.Patch, tc.wantPatch, res.Reason)
			}
			out := patched(t, []byte(tc.pod), res.Patch)
			obj, _ := decodeObject(out)
			spec, _ := obj["spec"].(map[string]any)
			if tc.wantNoField != "" {
				if _, ok := spec[tc.wantNoField]; ok {
					t.Errorf("%s still set: %s", tc.wantNoField, out)
				}
			}
			pinned, node := pinnedNode(spec)
			if tc.wantPinned == "" {
				if string(out) != tc.pod {
					t.Errorf("pod changed: %s", out)
				}
				return
			}
			if !pinned || node != tc.wantPinned {
				t.Errorf("pinned %v to %q, want %q: %s", pinned, node, tc.wantPinned, out)
			}
			// Whatever else was in the affinity survives.
			if strings.Contains(tc.pod, "podAntiAffinity") && !strings.Contains(string(out), `"podAntiAffinity":{"x":1}`) {
				t.Errorf("podAntiAffinity lost: %s", out)
			}
			if strings.Contains(tc.pod, "preferredDuring") && !strings.Contains(string(out), `"preferredDuringSchedulingIgnoredDuringExecution":[{"weight":1}]`) {
				t.Errorf("preferred terms lost: %s", out)
			}
			again, err := PodPinPatch(out)
			if err != nil || len(again.Patch) != 0 {
				t.Errorf("second pass: %v %v", again.Patch, err)
			}
		})
	}
	_ = json.Valid
}

// Property: for random affinities (pins, other terms, nulls and wrong types on the way), a rewrite
// does what diffing the rewritten pod does, and a second pass over its result changes nothing.
func TestPodPinPatchMatchesTheDiff(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	pick := func(options ...any) any { return options[rng.IntN(len(options))] }
	requirement := func() any {
		return pick(
			map[string]any{"key": nodeNameField, "operator": "In", "values": []any{pick("n1", "n2")}},
			map[string]any{"key": nodeNameField, "operator": "In", "values": []any{"n1", "n2"}},
			map[string]any{"key": nodeNameField, "operator": "NotIn", "values": []any{"n1"}},
			map[string]any{"key": "other", "operator": "In", "values": []any{"n1"}},
			map[string]any{"key": nodeNameField, "operator": "In", "values": []any{json.Number("5")}},
			map[string]any{"key": nodeNameField, "operator": "In", "values": []any{nil}},
			map[string]any{"key": nodeNameField, "operator": nil, "values": nil},
			"garbage", nil,
		)
	}
	list := func(item func() any) any {
		var l []any
		for range rng.IntN(3) {
			l = append(l, item())
		}
		return pick(l, l, nil, "garbage")
	}
	term := func() any {
		return pick(map[string]any{"matchFields": list(requirement), "matchExpressions": []any{}}, nil, 7)
	}
	for i := range 3000 {
		spec := map[string]any{"containers": []any{}}
		if rng.IntN(2) == 0 {
			spec["nodeName"] = pick("n1", "n2", "")
		}
		if rng.IntN(6) != 0 {
			required := pick(map[string]any{"nodeSelectorTerms": list(term)}, nil, "garbage")
			nodeAffinity := pick(map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": required, "preferredDuringSchedulingIgnoredDuringExecution": []any{}}, map[string]any{}, nil, []any{})
			spec["affinity"] = pick(map[string]any{"nodeAffinity": nodeAffinity, "podAntiAffinity": map[string]any{}}, nil, "x")
		}
		pod := map[string]any{"metadata": map[string]any{"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": true}}}, "spec": spec}
		raw, err := json.Marshal(pod)
		if err != nil {
			t.Fatal(err)
		}
		decoded, _ := decodeObject(raw)
		decodedSpec := decoded["spec"].(map[string]any)
		res, err := PodPinPatch(raw)
		if err != nil || len(res.Patch) == 0 {
			continue // no rewrite (or a malformed affinity): nothing to compare
		}
		// The reference rewrite: set the required terms on the decoded pod, drop nodeName, diff.
		aff, _ := decodedSpec["affinity"].(map[string]any)
		if aff == nil {
			aff = map[string]any{}
			decodedSpec["affinity"] = aff
		}
		na, _ := aff["nodeAffinity"].(map[string]any)
		if na == nil {
			na = map[string]any{}
			aff["nodeAffinity"] = na
		}
		node := decodedSpec["nodeName"].(string)
		na["requiredDuringSchedulingIgnoredDuringExecution"] = map[string]any{"nodeSelectorTerms": []any{map[string]any{
			"matchFields": []any{map[string]any{"key": nodeNameField, "operator": "In", "values": []any{node}}},
		}}}
		delete(decodedSpec, "nodeName")
		mutated, _ := json.Marshal(decoded)
		want, err := jsonpatch.CreatePatch(raw, mutated)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		got, wantOut := patched(t, raw, res.Patch), patched(t, raw, want)
		if json.Unmarshal(got, &g) != nil || json.Unmarshal(wantOut, &w) != nil || !reflect.DeepEqual(g, w) {
			t.Fatalf("case %d %s:\nwritten gives %s\ndiff gives    %s", i, raw, got, wantOut)
		}
		if again, err := PodPinPatch(got); err != nil || len(again.Patch) != 0 {
			t.Fatalf("case %d: second pass over %s: %+v, %v", i, got, again, err)
		}
	}
}
