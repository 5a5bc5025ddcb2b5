package webhookserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/daemonguard/daemonguard/internal/admission"
	"github.com/daemonguard/daemonguard/internal/kubetext"
)

// policyErrorFieldManager owns admission.PolicyErrorAnnotation and nothing else, so GitOps tools that apply
// the ConfigMap server-side (Argo CD with ServerSideApply=true) neither own nor diff it.
const policyErrorFieldManager = "daemonguard-webhook"

// maxPolicyErrorLen bounds the error part of the annotation's value (in bytes, cut at a rune
// boundary): a whole compile error list would bloat the object and Argo CD's status with it.
const maxPolicyErrorLen = 512

// policyErrorWrite is one change of admission.PolicyErrorAnnotation on a ConfigMap.
type policyErrorWrite struct {
	ConfigMap string
	// ResourceVersion is the version whose data was evaluated: the write is refused (Conflict)
	// when the ConfigMap changed since, and that change reloads the set again.
	ResourceVersion string
	// Value is the annotation's new value; "" removes it.
	Value string
}

// blamesConfigMap tells whether a reload error concerns ConfigMap name: it names one of its
// files, or it names no ConfigMap at all (then every policy ConfigMap may be at fault).
func blamesConfigMap(errText, name string) bool {
	return strings.Contains(errText, "configmap/"+name+"/") || !strings.Contains(errText, "configmap/")
}

// planPolicyErrors decides which policy ConfigMaps need admission.PolicyErrorAnnotation written or removed
// after a reload that ended in reloadErr (nil when the set loaded). ConfigMaps already carrying
// the right value are left out, so replicas that reach the same decision do not write again and a
// write of the annotation alone plans nothing new.
func planPolicyErrors(cms []corev1.ConfigMap, reloadErr error) []policyErrorWrite {
	var writes []policyErrorWrite
	for i := range cms {
		cm := &cms[i]
		want := ""
		if reloadErr != nil && blamesConfigMap(reloadErr.Error(), cm.Name) {
			want = policyErrorValue(cm, reloadErr)
		}
		if cm.Annotations[admission.PolicyErrorAnnotation] != want {
			writes = append(writes, policyErrorWrite{ConfigMap: cm.Name, ResourceVersion: cm.ResourceVersion, Value: want})
		}
	}
	return writes
}

// policyErrorValue is the annotation's value for a ConfigMap the reload error blames: its first
// Rego error (file, line, code, message) when the error list locates any in this ConfigMap, else
// the first located Rego error of the set, otherwise the first line of the error.
func policyErrorValue(cm *corev1.ConfigMap, reloadErr error) string {
	prefix := "configmap/" + cm.Name + "/"
	var mine, located []*ast.Error
	for _, e := range regoErrors(reloadErr) {
		if e.Location == nil {
			continue
		}
		located = append(located, e)
		if strings.HasPrefix(e.Location.File, prefix) {
			mine = append(mine, e)
		}
	}
	pick, scope := mine, "in this ConfigMap"
	if len(mine) == 0 {
		// E.g. a ConfigMap that replaces daemonguard.lib breaks the built-ins that use it: the
		// errors are located in their files, which still say where to look.
		pick, scope = located, "in the policy set"
	}
	var msg string
	if len(pick) > 0 {
		first := pick[0]
		msg = fmt.Sprintf("%s:%d: %s: %s", first.Location.File, first.Location.Row, first.Code, first.Message)
		if len(pick) > 1 {
			msg += fmt.Sprintf(" (and %d more %s)", len(pick)-1, scope)
		}
	} else {
		msg, _, _ = strings.Cut(reloadErr.Error(), "\n")
	}
	msg = kubetext.Truncate(strings.Join(strings.Fields(msg), " "), maxPolicyErrorLen)
	return msg + "; data " + dataDigest(cm) + " rejected, the last good policy set keeps serving"
}

// regoErrors collects the OPA errors anywhere in err's tree (wrapped and joined errors).
func regoErrors(err error) []*ast.Error {
	switch e := err.(type) {
	case nil:
		return nil
	case ast.Errors:
		return e
	case *ast.Error:
		return []*ast.Error{e}
	case interface{ Unwrap() []error }:
		var out []*ast.Error
		for _, inner := range e.Unwrap() {
			out = append(out, regoErrors(inner)...)
		}
		return out
	default:
		return regoErrors(errors.Unwrap(err))
	}
}

// dataDigest identifies a ConfigMap's content (data and binaryData, not metadata): "sha256:"
// and the first 12 hex digits of the SHA-256 of every key and value in key order. It stays the
// same across writes of the annotation, unlike the resourceVersion.
func dataDigest(cm *corev1.ConfigMap) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(cm.Data)) {
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(cm.Data[k]), cm.Data[k])
	}
	for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
		fmt.Fprintf(h, "b%d:%s%d:%s", len(k), k, len(cm.BinaryData[k]), cm.BinaryData[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))[:12]
}

// writePolicyErrors applies the planned annotation writes, each a JSON merge patch of the one
// annotation with the evaluated resourceVersion as precondition. A write that fails is logged
// and skipped: the annotation is a report, reloads never depend on it.
func (r *policyReloader) writePolicyErrors(ctx context.Context, writes []policyErrorWrite) {
	for _, w := range writes {
		var value any // nil removes the key in a merge patch
		if w.Value != "" {
			value = w.Value
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": w.ResourceVersion,
			"annotations":     map[string]any{admission.PolicyErrorAnnotation: value},
		}})
		if err != nil {
			r.log.Error(err, "Failed to encode the policy error annotation", "configMap", w.ConfigMap)
			continue
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: w.ConfigMap, Namespace: r.namespace}}
		err = r.client.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(policyErrorFieldManager))
		switch {
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Changed or deleted since it was evaluated: that change triggers the next reload,
			// which decides again.
			r.log.V(1).Info("Skipped the policy error annotation of a changed ConfigMap", "configMap", w.ConfigMap, "error", err.Error())
		case err != nil:
			r.log.Error(err, "Failed to write the policy error annotation; reloads go on, the Event and /policy-status still report the error (does the webhook's Role allow patch on configmaps?)",
				"configMap", w.ConfigMap, "annotation", admission.PolicyErrorAnnotation)
		case w.Value == "":
			r.log.Info("Removed the policy error annotation", "configMap", w.ConfigMap)
		default:
			r.log.Info("Recorded the policy error on the ConfigMap", "configMap", w.ConfigMap, "annotation", admission.PolicyErrorAnnotation)
		}
	}
}

// policyContentChanged lets through the ConfigMap events that can change the policy set: every
// create and delete, and updates of data, binaryData or labels. Updates of annotations alone
// (admission.PolicyErrorAnnotation written by this or another replica, Argo CD's tracking) reload nothing.
var policyContentChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		older, ok1 := e.ObjectOld.(*corev1.ConfigMap)
		newer, ok2 := e.ObjectNew.(*corev1.ConfigMap)
		if !ok1 || !ok2 {
			return true
		}
		return !maps.Equal(older.Data, newer.Data) || !maps.EqualFunc(older.BinaryData, newer.BinaryData, slices.Equal) ||
			!maps.Equal(older.Labels, newer.Labels)
	},
}
