// Package admission is daemonguard's admission core: what every caller of admission uses to
// decide about a DaemonSet write. The webhooks (package webhook adapts it to AdmissionReviews),
// `daemonguard check` and `mutate`, the audit and `rollout plan` all run it; none decides on its
// own what a review comes to.
//
// Files:
//   - review.go: the pipeline a review follows, each step once (Reviewer: decode, gather the
//     namespace's labels and the nodes through Lookups, evaluate the policy set, decide), the
//     rollout controller's status-only update that admission skips (StatusOnlyUpdateCEL), and
//     the Verdict, including what a review whose policies could not be evaluated comes to under
//     each FailureMode.
//   - nodesnapshot.go: the list of nodes the webhook's reviews share until a node changes
//     (NodeSnapshot), so that a review does not copy the cache's nodes.
//   - bounds.go: the bounds on what a tenant writes and what admission answers: a daemonguard
//     annotation past its size limit is denied before any policy runs (AnnotationLimitsPolicy),
//     and a verdict's messages are bounded whatever its violations (MaxAnswerMessage).
//   - mutate.go: the template patch that applies the inject policy's decision to the raw
//     DaemonSet (DaemonSetPatch), and the toleration rule it and the in-process policy share
//     (Covers).
//   - pin.go: the pod pin (PodPinPatch).
//   - keys.go: the daemonguard.io labels and annotations of admission, the names of the DaemonSet
//     webhooks, the exempt namespaces (ExemptNamespaces) and the policy ConfigMaps as policy
//     sources (PolicySources).
//
// Patches are computed from the raw object, not from a typed copy, so that fields unknown to this
// build survive.
//
// # Injection: three paths
//
// What is injected is decided once, by the Rego inject policy; three paths apply it.
//
//  1. The template patch (DaemonSetPatch, through Reviewer.Mutate): the DaemonSet mutating
//     webhook, on every CREATE and UPDATE of a DaemonSet in InjectionScope, adds the inject
//     policy's tolerations and priority class to the pod template. It runs unless in-process
//     injection is on; `check`, `mutate`, the audit and the plan simulate it (Reviewer.Simulate)
//     whichever path the cluster uses.
//  2. The pod pin (PodPinPatch): the pod mutating webhook, on every CREATE of a pod controlled by
//     a DaemonSet, moves spec.nodeName into a required node affinity so that the pod goes
//     through the default scheduler. It runs in every installation, with in-process injection
//     too, and fails open (webhook.PodPinFailurePolicy). Pods never pass through Reviewer, whose
//     decode step is where DaemonSets are checked against the exempt namespaces, so the pod
//     handler repeats that check itself: the API server's namespace selector normally keeps
//     exempt namespaces away, and a configuration without it must still leave a kube-system pod
//     exactly as its controller wrote it.
//  3. The generated MutatingAdmissionPolicy (internal/inprocess, `daemonguard policy export`, the
//     chart's webhook.inProcessInjection): the API server itself applies path 1's patch in CEL,
//     generated from the same inject policy and Covers, within the same selectors. When it is
//     installed the DaemonSet mutating webhook is not registered (webhook.ConfigurationOptions
//     InProcessInjection), so paths 1 and 3 never both run in a cluster; path 2 and validation
//     stay with the webhooks.
package admission
