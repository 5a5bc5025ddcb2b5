package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// IgnoreLabel opts a DaemonSet out of every daemonguard webhook (also used as objectSelector).
const IgnoreLabel = "daemonguard.io/ignore"

// Facts supplies what the webhook knows of the live cluster. Nil functions mean "unknown".
type Facts struct {
	NamespaceLabels func(ctx context.Context, name string) (map[string]string, error)
	Nodes           func(ctx context.Context) ([]*corev1.Node, error)
}

func (h *Handlers) exempt(namespace string) bool {
	return slices.Contains(h.ExemptNamespaces, namespace)
}

// ignored tells objects labelled daemonguard.io/ignore=true (the objectSelector normally keeps
// them away; this guards configurations without it).
func ignored(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	return labels[IgnoreLabel] == "true"
}

// daemonSetRequest is a DaemonSet admission request with what the webhook read of the cluster for
// it, or the response that ends it early.
type daemonSetRequest struct {
	in  *policy.Input
	end *admission.Response
}

// gatherDaemonSet decodes a DaemonSet request and reads the facts its evaluation needs, in one
// step: the namespace's labels and, with needNodes (the inject policy never reads nodes), what
// the nodes say of the template (policy.Input.Cluster). It ends the request early when it is
// malformed (400), exempt, opted out by label, or the rollout controller's status-only update.
// Facts that cannot be read are left out rather than guessed, which turns off the checks that
// need them.
func (h *Handlers) gatherDaemonSet(ctx context.Context, req admission.Request, needNodes bool) daemonSetRequest {
	end := func(r admission.Response) daemonSetRequest { return daemonSetRequest{end: &r} }
	if k := req.Kind; k.Group != "apps" || k.Version != "v1" || k.Kind != "DaemonSet" {
		return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("this endpoint admits apps/v1 DaemonSet, got %s/%s %s", k.Group, k.Version, k.Kind)))
	}
	if len(req.Object.Raw) == 0 {
		return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("request has no object")))
	}
	if h.exempt(req.Namespace) {
		return end(admission.Allowed("namespace " + req.Namespace + " is exempt"))
	}
	obj, err := decodeObject(req.Object.Raw)
	if err != nil {
		return end(admission.Errored(http.StatusBadRequest, err))
	}
	if ignored(obj) {
		return end(admission.Allowed("labelled " + IgnoreLabel + "=true"))
	}
	in := &policy.Input{Operation: policy.Operation(req.Operation), Object: obj, Namespace: policy.Namespace{Name: req.Namespace, Labels: map[string]string{}}}
	if len(req.OldObject.Raw) > 0 {
		if in.OldObject, err = decodeObject(req.OldObject.Raw); err != nil {
			return end(admission.Errored(http.StatusBadRequest, fmt.Errorf("old object: %w", err)))
		}
		if req.Operation == admissionv1.Update && onlyStatusAnnotationsChanged(in.OldObject, obj) {
			// The rollout controller reporting progress: neither a new injection (which would
			// start a new revision behind the user's back) nor a policy verdict is due.
			return end(admission.Allowed("only daemonguard status annotations changed"))
		}
	}
	if h.Facts.NamespaceLabels != nil {
		labels, err := h.Facts.NamespaceLabels(ctx, req.Namespace)
		if err != nil {
			h.Log.V(1).Info("Namespace labels unavailable", "namespace", req.Namespace, "err", err)
		} else if labels != nil {
			in.Namespace.Labels = labels
		}
	}
	if needNodes && h.Facts.Nodes != nil {
		nodeList, err := h.Facts.Nodes(ctx)
		if err != nil {
			h.Log.V(1).Info("Nodes unavailable; node-relative checks skipped", "err", err)
		} else {
			in.Cluster = templateFacts(obj, nodeList)
		}
	}
	return daemonSetRequest{in: in}
}

// templateFacts returns how many nodes there are and how many the DaemonSet's template targets;
// nil when the nodes are unknown or the template is malformed, which turns off the checks that
// need them.
func templateFacts(obj map[string]any, nodeList []*corev1.Node) *policy.ClusterFacts {
	if nodeList == nil {
		return nil
	}
	podSpec, ok := templatePodSpec(obj)
	if !ok {
		return nil
	}
	return &policy.ClusterFacts{Nodes: len(nodeList), MatchingNodes: nodes.Count(podSpec, nodeList)}
}

// templatePodSpec converts the parts of spec.template.spec that decide node eligibility (node
// selector, affinity, tolerations) to a typed PodSpec; nothing else of the pod spec is needed.
func templatePodSpec(obj map[string]any) (*corev1.PodSpec, bool) {
	spec, _ := obj["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	podSpec, isObject := template["spec"].(map[string]any)
	if !isObject && template["spec"] != nil {
		return nil, false
	}
	scheduling := make(map[string]any, 3)
	for _, k := range []string{"nodeSelector", "affinity", "tolerations"} {
		if v, ok := podSpec[k]; ok {
			scheduling[k] = v
		}
	}
	raw, err := json.Marshal(scheduling)
	if err != nil {
		return nil, false
	}
	var typed corev1.PodSpec
	if json.Unmarshal(raw, &typed) != nil {
		return nil, false
	}
	return &typed, true
}

// onlyStatusAnnotationsChanged tells an update that differs from the stored object only in the
// rollout controller's status.daemonguard.io/ annotations and in fields the API server maintains.
// Neither object is modified.
func onlyStatusAnnotationsChanged(oldObj, newObj map[string]any) bool {
	changed := false
	strip := func(obj map[string]any) map[string]any {
		out := make(map[string]any, len(obj))
		for k, v := range obj {
			if k != "status" && k != "metadata" {
				out[k] = v
			}
		}
		meta, _ := obj["metadata"].(map[string]any)
		metaOut := make(map[string]any, len(meta))
		for k, v := range meta {
			switch k {
			case "managedFields", "resourceVersion", "generation":
			case "annotations":
				ann, ok := v.(map[string]any)
				if !ok {
					metaOut[k] = v
					continue
				}
				kept := make(map[string]any, len(ann))
				for a, x := range ann {
					if strings.HasPrefix(a, rolloutapi.StatusPrefix) {
						changed = true
						continue
					}
					kept[a] = x
				}
				if len(kept) > 0 {
					metaOut[k] = kept
				}
			default:
				metaOut[k] = v
			}
		}
		out["metadata"] = metaOut
		return out
	}
	same := reflect.DeepEqual(strip(oldObj), strip(newObj))
	return changed && same
}
