// Package policy compiles daemonguard's Rego policies into an in-memory, concurrency-safe policy
// set and evaluates DaemonSets against it: which tolerations and priority class to inject, and which
// violations to deny, warn about or record. The Rego is the only definition of what a policy
// decides; this package compiles it once per policy set, prepares its queries, and swaps a new set
// in atomically, so a reload never blocks or disturbs an evaluation in flight. Every set is
// compiled in one sandbox (sandbox.go: an allow-list of builtins, no network, clock or randomness)
// and loaded within a deadline and a heap budget (limits.go, trial.go).
package policy

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// Action is what happens to a request that violates a policy.
type Action string

// Enforcement actions.
const (
	// Deny rejects the request with the violation's message.
	Deny Action = "deny"
	// Warn admits the request and returns the message as an admission warning (kubectl prints it).
	Warn Action = "warn"
	// DryRun admits the request silently; the violation is only logged, counted and audited.
	DryRun Action = "dryrun"
)

// Label is the action as the CLI's reports print it: DENY, WARN or DRYRUN.
func (a Action) Label() string {
	switch a {
	case Deny:
		return "DENY"
	case Warn:
		return "WARN"
	}
	return "DRYRUN"
}

func parseAction(s string) (Action, error) {
	switch a := Action(s); a {
	case Deny, Warn, DryRun:
		return a, nil
	}
	return "", fmt.Errorf("enforcement action %q is not one of deny, warn, dryrun", s)
}

// Violation is one policy's objection to an object.
type Violation struct {
	Policy  string `json:"policy"`
	Field   string `json:"field"`
	Message string `json:"message"`
	Action  Action `json:"action"`
}

func (v Violation) String() string {
	return fmt.Sprintf("[%s] %s: %s", v.Policy, v.Field, v.Message)
}

// InjectDecision is what the inject policy wants added to a DaemonSet's pod template.
type InjectDecision struct {
	Inject            bool                `json:"inject"`
	Reason            string              `json:"reason,omitempty"`
	Tolerations       []corev1.Toleration `json:"tolerations,omitempty"`
	PriorityClassName string              `json:"priorityClassName,omitempty"`
}

// Operation says why an object is evaluated; policies can tell admission from audit and CLI.
type Operation string

// Operations in the input document.
const (
	OpCreate Operation = "CREATE"
	OpUpdate Operation = "UPDATE"
	OpAudit  Operation = "AUDIT"
	OpCheck  Operation = "CHECK"
)

// Namespace is what policies know of the object's namespace.
type Namespace struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// ClusterFacts are facts only a live cluster can supply; nil offline.
type ClusterFacts struct {
	Nodes         int `json:"nodes"`
	MatchingNodes int `json:"matchingNodes"`
}

// PriorityClass is the PriorityClass the pod template names (spec.template.spec.priorityClassName),
// as the cluster has it: policies compare its value with a bound, since a name says nothing of the
// priority it grants.
type PriorityClass struct {
	Name  string
	Value int32
}

// Input is the input document of every evaluation (see policies/README.md). Object and OldObject
// are the DaemonSet as generic JSON (numbers as json.Number), so fields unknown to this build
// still reach the policies.
type Input struct {
	Operation Operation
	Object    map[string]any
	OldObject map[string]any // nil on CREATE and offline
	Namespace Namespace
	Cluster   *ClusterFacts
	// PriorityClass is nil offline, for a template without a priorityClassName, and when the
	// class does not exist or could not be read.
	PriorityClass *PriorityClass
}

// Module is one Rego file and where it came from (a path, or configmap/NAME/KEY), for errors.
type Module struct {
	Name   string
	Source string
}
