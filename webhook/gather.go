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
		if req.Operation == admissionv1.Update && statusOnlyUpdate(in.OldObject, obj) {
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

// StatusOnlyUpdateCEL is the one definition of the rollout controller's progress report, the
// update no DaemonSet admission acts on: an UPDATE whose spec, labels and annotations other than
// status.daemonguard.io/ ones are unchanged, and whose status.daemonguard.io/ annotations changed.
// Such a write needs neither an injection (which would start a revision behind the user's back)
// nor a policy verdict. The webhook configurations skip it with !(StatusOnlyUpdateCEL) as a
// matchCondition, so a rollout keeps reporting while the webhook is down; the in-process
// injection policy uses it as a variable; the handlers answer it with statusOnlyUpdate, the same
// rule over decoded objects (TestStatusOnlyUpdateMatchesCEL holds the two together).
const StatusOnlyUpdateCEL = `request.operation == 'UPDATE' && object.spec == oldObject.spec` +
	` && (has(object.metadata.labels) ? object.metadata.labels : {}) == (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {})` +
	` && (has(object.metadata.annotations) ? object.metadata.annotations : {}).all(k, k.startsWith('` + rolloutapi.StatusPrefix + `') || (has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k]))` +
	` && (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}).all(k, k.startsWith('` + rolloutapi.StatusPrefix + `') || (has(object.metadata.annotations) && k in object.metadata.annotations))` +
	` && ((has(object.metadata.annotations) ? object.metadata.annotations : {}).exists(k, k.startsWith('` + rolloutapi.StatusPrefix + `') && !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations && oldObject.metadata.annotations[k] == object.metadata.annotations[k]))` +
	` || (has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}).exists(k, k.startsWith('` + rolloutapi.StatusPrefix + `') && !(has(object.metadata.annotations) && k in object.metadata.annotations)))`

// statusOnlyUpdate is StatusOnlyUpdateCEL over the decoded old and new objects of an UPDATE:
// same spec, same labels (absent and empty alike), same annotations outside
// status.daemonguard.io/, and some status.daemonguard.io/ annotation added, changed or removed.
// Neither object is modified.
func statusOnlyUpdate(oldObj, newObj map[string]any) bool {
	if !reflect.DeepEqual(oldObj["spec"], newObj["spec"]) {
		return false
	}
	oldLabels, newLabels := metaMap(oldObj, "labels"), metaMap(newObj, "labels")
	if len(oldLabels) != 0 || len(newLabels) != 0 {
		if !reflect.DeepEqual(oldLabels, newLabels) {
			return false
		}
	}
	oldAnn, newAnn := metaMap(oldObj, "annotations"), metaMap(newObj, "annotations")
	statusChanged := false
	for k, v := range newAnn {
		was, ok := oldAnn[k]
		same := ok && reflect.DeepEqual(was, v)
		switch {
		case strings.HasPrefix(k, rolloutapi.StatusPrefix):
			statusChanged = statusChanged || !same
		case !same:
			return false
		}
	}
	for k := range oldAnn {
		if _, ok := newAnn[k]; ok {
			continue
		}
		if !strings.HasPrefix(k, rolloutapi.StatusPrefix) {
			return false
		}
		statusChanged = true
	}
	return statusChanged
}

// metaMap returns metadata[key] as a map (nil when absent or not an object).
func metaMap(obj map[string]any, key string) map[string]any {
	meta, _ := obj["metadata"].(map[string]any)
	m, _ := meta[key].(map[string]any)
	return m
}
