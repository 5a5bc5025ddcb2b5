package admission

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	jsonpatchapply "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	"gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/daemonguard/daemonguard/internal/nodes"
	"github.com/daemonguard/daemonguard/internal/policy"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Lookups read what admission knows of the live cluster. Nil functions mean "unknown".
type Lookups struct {
	NamespaceLabels func(ctx context.Context, name string) (map[string]string, error)
	Nodes           func(ctx context.Context) ([]*corev1.Node, error)
	// PriorityClass reads the value of the named PriorityClass; an error apierrors.IsNotFound
	// says there is none.
	PriorityClass func(ctx context.Context, name string) (int32, error)
}

// ReaderLookups read the cluster through a controller-runtime reader, normally the manager's cache.
// Admission only reads these objects, so the cache's own copies serve (no deep copy per review).
//
// A namespace or PriorityClass the cache does not hold is read again through live, normally the
// manager's API reader, before it counts as absent: the cache trails the API server, and a
// namespace created a moment before its DaemonSet (one helm install or Argo CD sync) would
// otherwise read as unmarked, its DaemonSet denied or left without injection. Such reads run
// inside the webhook's bound on evaluations at once. A nil live trusts the cache alone.
func ReaderLookups(reader, live client.Reader) Lookups {
	get := func(ctx context.Context, name string, obj client.Object) error {
		err := reader.Get(ctx, types.NamespacedName{Name: name}, obj, client.UnsafeDisableDeepCopy)
		if apierrors.IsNotFound(err) && live != nil {
			err = live.Get(ctx, types.NamespacedName{Name: name}, obj)
		}
		return err
	}
	return Lookups{
		NamespaceLabels: func(ctx context.Context, name string) (map[string]string, error) {
			var ns corev1.Namespace
			if err := get(ctx, name, &ns); err != nil {
				return nil, err
			}
			return ns.Labels, nil
		},
		Nodes: func(ctx context.Context) ([]*corev1.Node, error) {
			var list corev1.NodeList
			if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
				return nil, err
			}
			out := make([]*corev1.Node, len(list.Items))
			for i := range list.Items {
				out[i] = &list.Items[i]
			}
			return out, nil
		},
		PriorityClass: func(ctx context.Context, name string) (int32, error) {
			var pc schedulingv1.PriorityClass
			if err := get(ctx, name, &pc); err != nil {
				return 0, err
			}
			return pc.Value, nil
		},
	}
}

// PriorityClassValues is a Lookups.PriorityClass over the values of PriorityClasses read
// beforehand (name to value), for callers that list them once.
func PriorityClassValues(values map[string]int32) func(context.Context, string) (int32, error) {
	return func(_ context.Context, name string) (int32, error) {
		v, ok := values[name]
		if !ok {
			return 0, apierrors.NewNotFound(schedulingv1.Resource("priorityclasses"), name)
		}
		return v, nil
	}
}

// Review is one DaemonSet write in admission's terms: the objects as raw JSON, as the API server
// sends them or a manifest holds them.
type Review struct {
	Operation policy.Operation
	Namespace string
	Object    []byte
	OldObject []byte // UPDATE only
}

// Reviewer is daemonguard's admission core, the one pipeline behind the webhooks, `daemonguard
// check` and `mutate`, the audit and `rollout plan`: decode the review, gather the facts the
// policies read, evaluate the policy set, decide. Each step runs once per review.
type Reviewer struct {
	// Exempt namespaces are never acted on (ExemptNamespaces).
	Exempt []string
	// FailureMode decides a review whose policies cannot be evaluated (FailClosed when empty).
	FailureMode FailureMode
	Lookups     Lookups
	Log         logr.Logger
}

// Outcome is what admission decided about one review. Exactly one of Skip, Malformed and Failed
// is set when admission ends early; an object past a size bound (AnnotationLimitsPolicy) ends it
// early too, with its one violation and the verdict that denies it.
type Outcome struct {
	// Skip says why admission leaves the write alone (an exempt namespace, a status-only update).
	Skip string
	// Malformed is the reason the review cannot be evaluated (answered as a bad request).
	Malformed error
	// Failed is the policy engine's error; Verdict is then the failure mode's (FailureMode.Verdict).
	Failed error
	// Inject is the inject policy's decision (outside InjectionScope: not to inject, and why) and
	// Patch the JSON patch that applies it.
	Inject policy.InjectDecision
	Patch  []jsonpatch.Operation
	// Mutated is the object with Patch applied (Simulate only).
	Mutated []byte
	// Violations and Verdict are the validation policies' (Validate and Simulate), or Verdict the
	// failure mode's when Failed is set.
	Violations []policy.Violation
	Verdict    Verdict
	// Input is what the policies were given.
	Input *policy.Input
	// bounded says the object is past a size bound: no policy is evaluated on it.
	bounded bool
}

func (r Outcome) ended() bool {
	return r.Skip != "" || r.Malformed != nil || r.Failed != nil || r.bounded
}

// Err is the error that ended the review early, Malformed before Failed; nil when it was skipped
// or decided by the policies.
func (r Outcome) Err() error {
	if r.Malformed != nil {
		return r.Malformed
	}
	return r.Failed
}

// Mutate decides what the inject policy adds to the DaemonSet (the mutating webhook).
func (a *Reviewer) Mutate(ctx context.Context, set *policy.Set, rv Review) Outcome {
	r, _ := a.begin(ctx, rv, false)
	if !r.ended() {
		a.inject(ctx, set, &r)
	}
	return r
}

// InjectionScope says why the inject policy is not asked about a DaemonSet, or "" when it is:
// injection is for node agents an administrator named, the DaemonSets of namespaces labelled
// NodeAgentsLabel=true, and a DaemonSet labelled IgnoreLabel=true opts out. The mutating
// webhook's selectors (webhook.Configurations) say the same to the API server, so that it does
// not even call the webhook; this is the rule for every caller of the core, which reads the
// labels itself.
// Namespace labels that cannot be read count as unmarked: nothing is injected on a guess.
func InjectionScope(namespace string, namespaceLabels map[string]string, obj map[string]any) string {
	if !NodeAgentsNamespace(namespaceLabels) {
		return fmt.Sprintf("namespace %s is not marked for node agents (an administrator labels it %s=true)", namespace, NodeAgentsLabel)
	}
	if ignored(obj) {
		return "labelled " + IgnoreLabel + "=true"
	}
	return ""
}

// NodeAgentsNamespace tells a namespace an administrator marked for node agents
// (NodeAgentsLabel=true): there, injection applies (InjectionScope), and analysis gates read what
// they name. Labels that cannot be read count as unmarked. The node_agent_grants policy reads the
// same mark in Rego (held together by policies_test.go).
func NodeAgentsNamespace(labels map[string]string) bool { return labels[NodeAgentsLabel] == "true" }

// Validate judges the DaemonSet by the validation policies (the validating webhook).
func (a *Reviewer) Validate(ctx context.Context, set *policy.Set, rv Review) Outcome {
	r, nodeList := a.begin(ctx, rv, true)
	if !r.ended() {
		a.clusterFacts(ctx, r.Input, nodeList)
		a.validate(ctx, set, &r)
	}
	return r
}

// Simulate is both webhooks in the API server's order, for the CLI and the audit: the inject
// policy's patch is applied, and the validation policies judge the object as it would be stored.
func (a *Reviewer) Simulate(ctx context.Context, set *policy.Set, rv Review) Outcome {
	r, nodeList := a.begin(ctx, rv, true)
	if r.ended() {
		return r
	}
	r.Mutated = rv.Object
	if a.inject(ctx, set, &r); r.ended() {
		return r
	}
	if len(r.Patch) > 0 {
		patched, err := applyPatch(rv.Object, r.Patch)
		if err != nil {
			r.Malformed = err
			return r
		}
		if r.Input.Object, err = decodeObject(patched); err != nil {
			r.Malformed = err
			return r
		}
		r.Mutated = patched
	}
	a.clusterFacts(ctx, r.Input, nodeList)
	a.validate(ctx, set, &r)
	return r
}

// clusterFacts gathers what the validation policies know of the cluster about the object as it
// would be stored: the nodes its template targets, and the PriorityClass it names.
func (a *Reviewer) clusterFacts(ctx context.Context, in *policy.Input, nodeList []*corev1.Node) {
	in.Cluster = templateFacts(in.Object, nodeList)
	in.PriorityClass = a.priorityClass(ctx, in.Object)
}

// priorityClass reads the PriorityClass spec.template.spec.priorityClassName names; nil without a
// name or a lookup, and when the class does not exist or cannot be read (the policies then judge
// the name alone).
func (a *Reviewer) priorityClass(ctx context.Context, obj map[string]any) *policy.PriorityClass {
	spec, _ := obj["spec"].(map[string]any)
	template, _ := spec["template"].(map[string]any)
	podSpec, _ := template["spec"].(map[string]any)
	name, _ := podSpec["priorityClassName"].(string)
	if name == "" || a.Lookups.PriorityClass == nil {
		return nil
	}
	value, err := a.Lookups.PriorityClass(ctx, name)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			a.Log.V(1).Info("PriorityClass unavailable; its value is unknown to the policies", "priorityClass", name, "err", err)
		}
		return nil
	}
	return &policy.PriorityClass{Name: name, Value: value}
}

// begin decodes the review and, unless that ends it, gathers the namespace's labels into the
// policies' input and, with needNodes, the nodes.
func (a *Reviewer) begin(ctx context.Context, rv Review, needNodes bool) (Outcome, []*corev1.Node) {
	r := a.decode(rv)
	if r.ended() {
		return r, nil
	}
	var nodeList []*corev1.Node
	r.Input.Namespace.Labels, nodeList = a.gather(ctx, rv.Namespace, needNodes)
	return r, nodeList
}

// decode reads the review into the policies' input, or ends it: exempt namespace, malformed
// object, or the rollout controller's status-only update.
func (a *Reviewer) decode(rv Review) Outcome {
	if len(rv.Object) == 0 {
		return Outcome{Malformed: fmt.Errorf("request has no object")}
	}
	if slices.Contains(a.Exempt, rv.Namespace) {
		return Outcome{Skip: "namespace " + rv.Namespace + " is exempt"}
	}
	obj, err := decodeObject(rv.Object)
	if err != nil {
		return Outcome{Malformed: err}
	}
	in := &policy.Input{Operation: rv.Operation, Object: obj, Namespace: policy.Namespace{Name: rv.Namespace, Labels: map[string]string{}}}
	if len(rv.OldObject) > 0 {
		if in.OldObject, err = decodeObject(rv.OldObject); err != nil {
			return Outcome{Malformed: fmt.Errorf("old object: %w", err)}
		}
		if rv.Operation == policy.OpUpdate && statusOnlyUpdate(in.OldObject, obj) {
			return Outcome{Skip: "only daemonguard status annotations changed"}
		}
		if oversized(in.OldObject) != nil {
			// Stored while admission was bypassed: the policies do without it rather than parse
			// it, and the update that fixes the object is judged on the object alone.
			a.Log.V(1).Info("Left out an old object past an annotation size limit", "namespace", rv.Namespace)
			in.OldObject = nil
		}
	}
	if v := oversized(obj); v != nil {
		violations := []policy.Violation{*v}
		return Outcome{Input: in, bounded: true, Violations: violations, Verdict: VerdictOf(violations), Mutated: rv.Object,
			Inject: policy.InjectDecision{Reason: "not evaluated: " + v.Field + " is past its size limit"}}
	}
	return Outcome{Input: in}
}

// gather reads the namespace's labels and, with needNodes (the inject policy never reads nodes),
// the nodes. Facts that cannot be read are left out rather than guessed, which turns off the
// checks that need them.
func (a *Reviewer) gather(ctx context.Context, namespace string, needNodes bool) (map[string]string, []*corev1.Node) {
	labels := map[string]string{}
	if a.Lookups.NamespaceLabels != nil {
		l, err := a.Lookups.NamespaceLabels(ctx, namespace)
		if err != nil {
			a.Log.V(1).Info("Namespace labels unavailable", "namespace", namespace, "err", err)
		} else if l != nil {
			labels = l
		}
	}
	var nodeList []*corev1.Node
	if needNodes && a.Lookups.Nodes != nil {
		var err error
		if nodeList, err = a.Lookups.Nodes(ctx); err != nil {
			a.Log.V(1).Info("Nodes unavailable; node-relative checks skipped", "err", err)
		}
	}
	return labels, nodeList
}

// inject asks the inject policy and patches, for DaemonSets in InjectionScope only; the others
// get a decision not to inject that says why.
func (a *Reviewer) inject(ctx context.Context, set *policy.Set, r *Outcome) {
	if reason := InjectionScope(r.Input.Namespace.Name, r.Input.Namespace.Labels, r.Input.Object); reason != "" {
		r.Inject = policy.InjectDecision{Reason: reason}
		return
	}
	var err error
	if r.Inject, err = evaluate(ctx, r.Input, set.Inject); err != nil {
		a.fail(r, err)
		return
	}
	if r.Patch, err = daemonSetPatch(r.Input.Object, r.Inject); err != nil {
		r.Malformed = err
	}
}

func (a *Reviewer) validate(ctx context.Context, set *policy.Set, r *Outcome) {
	var err error
	if r.Violations, err = evaluate(ctx, r.Input, set.Validate); err != nil {
		a.fail(r, err)
		return
	}
	r.Violations = append(r.Violations, gateViolations(r.Input)...)
	r.Verdict = VerdictOf(r.Violations)
}

// evaluate runs one policy query unless the review's deadline has already passed (expired).
func evaluate[T any](ctx context.Context, in *policy.Input, query func(context.Context, *policy.Input) (T, error)) (T, error) {
	if err := expired(ctx); err != nil {
		var zero T
		return zero, err
	}
	return query(ctx, in)
}

// fail ends a review whose policies could not be evaluated with the failure mode's verdict.
func (a *Reviewer) fail(r *Outcome, err error) {
	r.Failed, r.Verdict = err, a.FailureMode.Verdict(err)
}

// expired fails a review whose deadline has passed before its evaluation starts. OPA notices a
// cancelled context only from a goroutine that watches it, which a short evaluation on a busy
// machine can outrun: the answer would then depend on scheduling.
func expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("evaluate policies: %w", err)
	}
	return nil
}

// applyPatch applies a JSON patch to raw JSON.
func applyPatch(raw []byte, ops []jsonpatch.Operation) ([]byte, error) {
	data, err := json.Marshal(ops)
	if err != nil {
		return nil, err
	}
	p, err := jsonpatchapply.DecodePatch(data)
	if err != nil {
		return nil, err
	}
	return p.Apply(raw)
}

// ignored tells objects labelled daemonguard.io/ignore=true (the mutating webhook's
// objectSelector normally keeps them away; this guards configurations without it, and the CLI,
// the audit and the plan).
func ignored(obj map[string]any) bool {
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	return labels[IgnoreLabel] == "true"
}

// decodeObject decodes one JSON object into generic JSON, numbers kept exact as json.Number, so
// that the patch and the policies see every field, also those unknown to this build; all but
// metadata.managedFields, which is read past without being built. No policy reads it
// (policies/README.md), the patch does not touch it, and it is the largest nested part of a
// stored object: a third of the values a review decoded.
func decodeObject(raw []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeWithout(dec, "metadata", "managedFields")
	if err != nil {
		return nil, fmt.Errorf("decode object: %w", err)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("decode object: %s is not an object", jsonKind(v))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode object: data after the object")
	}
	return obj, nil
}

// decodeWithout reads the JSON value next in dec as generic JSON (json.Number numbers, as
// dec.Decode into an any), leaving out the member at path below it: path[0] of an object is
// read by the same rule with path[1:], and the last key of path is read past and left out. Of a
// key given twice the last value counts, as for json.Unmarshal.
func decodeWithout(dec *json.Decoder, path ...string) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return nil, err
			}
			name, _ := tok.(string)
			var v any
			switch {
			case name != path[0]:
				err = dec.Decode(&v)
			case len(path) > 1:
				v, err = decodeWithout(dec, path[1:]...)
			default:
				delete(obj, name)
				if err = dec.Decode(&skipped{}); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			obj[name] = v
		}
		_, err = dec.Token()
		return obj, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			var v any
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err = dec.Token()
		return list, err
	}
	return tok, nil // a string, json.Number, bool or nil
}

// skipped is a JSON value read and thrown away: the decoder checks its syntax and builds nothing.
type skipped struct{}

// UnmarshalJSON implements json.Unmarshaler.
func (*skipped) UnmarshalJSON([]byte) error { return nil }

// jsonKind names the kind of a generic JSON value, for errors.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	}
	return "a number"
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
// injection policy uses it as a variable; the core answers it with statusOnlyUpdate, the same
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

// Verdict is the admission outcome of a review: of its violations, or of the failure mode when
// its policies could not be evaluated.
type Verdict struct {
	Allowed  bool
	Denials  []policy.Violation // enforcement deny: the request is rejected with all of them
	Warnings []policy.Violation // enforcement warn: admitted, messages returned to the client
	DryRuns  []policy.Violation // enforcement dryrun: admitted silently, only recorded
	// Unevaluated is the policy engine's error when the policies could not be evaluated; the
	// failure mode set Allowed and the messages name it.
	Unevaluated error
}

// VerdictOf sorts violations by their enforcement action. Denials and warnings are kept apart so
// a rejected request still tells the user about every warning too.
func VerdictOf(violations []policy.Violation) Verdict {
	v := Verdict{}
	for _, x := range violations {
		switch x.Action {
		case policy.Warn:
			v.Warnings = append(v.Warnings, x)
		case policy.DryRun:
			v.DryRuns = append(v.DryRuns, x)
		default:
			v.Denials = append(v.Denials, x)
		}
	}
	v.Allowed = len(v.Denials) == 0
	return v
}

// FailureMode says what a review whose policies cannot be evaluated comes to (Outcome.Verdict).
// Neither mode admits silently. The webhooks take it from --failure-mode; `daemonguard check`
// judges as FailClosed, the webhooks' default; `mutate`, the audit and the plan also report the
// error itself, since they show what would be stored or found.
type FailureMode string

// Failure modes.
const (
	// FailClosed rejects the request, naming the evaluation error.
	FailClosed FailureMode = "deny"
	// FailOpenWithWarning admits the request with an admission warning (the webhook adds a log
	// line and a metric).
	FailOpenWithWarning FailureMode = "warn"
)

// Verdict is the failure mode's verdict on a review whose policies failed with err:
// FailOpenWithWarning admits it with a warning, any other mode denies it.
func (m FailureMode) Verdict(err error) Verdict {
	return Verdict{Allowed: m == FailOpenWithWarning, Unevaluated: err}
}

// DenialMessage joins the denials into the one message the API server shows the user, bounded
// in size (MaxAnswerMessage).
func (v Verdict) DenialMessage() string {
	if v.Unevaluated != nil {
		return "daemonguard could not evaluate its policies (failure mode deny): " + CutMessage(v.Unevaluated.Error(), MaxViolationMessage)
	}
	return joinDenials(v.Denials)
}

// WarningMessages are the admission warnings, one per violation up to MaxListedViolations and
// one that counts the rest, or the one that says a request was admitted unchecked; bounded in size
// together (MaxAnswerMessage).
func (v Verdict) WarningMessages() []string {
	if v.Unevaluated != nil && v.Allowed {
		return []string{"daemonguard could not evaluate its policies and admitted this object unchecked: " + CutMessage(v.Unevaluated.Error(), MaxViolationMessage)}
	}
	return warningMessages(v.Warnings)
}
