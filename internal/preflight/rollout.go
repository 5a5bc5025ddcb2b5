package preflight

import (
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/daemonguard/daemonguard/controller/rolloutplan"
	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// Rollout is how the new revision reaches the nodes.
type Rollout struct {
	// Strategy is "managed" (daemonguard's rollout controller), "RollingUpdate" or "OnDelete".
	Strategy string `json:"strategy"`
	// Summary says it in one sentence.
	Summary string `json:"summary"`
	// ReadyAfter is the pod start time the estimate assumes: the median, from creation to
	// Ready, of the DaemonSet's ready pods today; zero and ReadyKnown false when none says.
	ReadyAfter time.Duration `json:"readyAfter"`
	ReadyKnown bool          `json:"readyKnown"`
	// Estimate is how long until every replaced node runs an available new pod; zero when
	// nothing is replaced or it does not end by itself (OnDelete).
	Estimate time.Duration `json:"estimate"`
	// Managed is the controller's rollout, wave by wave (managed only).
	Managed *rolloutplan.Timeline `json:"managed,omitempty"`
	// Batches is how many nodes the rolling update replaces at once, and Waves how many times
	// (RollingUpdate only).
	Batch int `json:"batch,omitempty"`
	Waves int `json:"waves,omitempty"`
	// Stalls says the rolling update stops before it has replaced every node: new pods that
	// cannot be scheduled hold its whole budget (RollingUpdate only). Which nodes it reaches
	// before that is not known in advance; the others keep the old revision.
	Stalls bool `json:"stalls,omitempty"`
}

// planRollout describes the rollout of plan's replaced nodes.
//
// Assumptions (RollingUpdate): the controller replaces up to maxUnavailable nodes at a time
// (maxSurge when it is set: new pods start next to the old ones), in no order it promises, and a
// wave takes ReadyAfter plus minReadySeconds. Gained nodes get their pod at once and do not wait.
//
// Invariant (RollingUpdate, the DaemonSet controller's rollingUpdate): a new pod that cannot be
// scheduled never becomes available, so it holds one unit of the budget for good: without surge
// every such pod does (gained nodes too), with surge those replacing an old pod. When they are at
// least the budget, the update stops once it has reached that many of them.
func planRollout(in Snapshot, p Impact) Rollout {
	ds := in.After
	r := Rollout{ReadyAfter: in.ReadyAfter, ReadyKnown: in.ReadyKnown}
	replaced := p.Summary.Replaced
	wave := in.ReadyAfter + time.Duration(ds.Spec.MinReadySeconds)*time.Second
	switch {
	case rolloutapi.IsManaged(ds):
		r.Strategy = "managed"
		if !p.NewRevision {
			r.Summary = "no new revision: the rollout controller has nothing to replace"
			return r
		}
		f, err := managedRollout(in)
		if err != nil {
			r.Summary = err.Error()
			return r
		}
		r.Managed, r.Estimate = f, f.Duration
		r.Summary = fmt.Sprintf("daemonguard replaces %d nodes in %d waves, budget %d; %s", replaced, len(f.Waves), f.Budget, f.Outcome)
	case strategyOf(ds) == appsv1.OnDeleteDaemonSetStrategyType:
		r.Strategy = string(appsv1.OnDeleteDaemonSetStrategyType)
		r.Summary = fmt.Sprintf("OnDelete: no pod is replaced until it is deleted; %d nodes keep the old revision until then, new nodes get the new one", replaced)
	default:
		r.Strategy = string(appsv1.RollingUpdateDaemonSetStrategyType)
		desired := p.Summary.Replaced + p.Summary.Unchanged + p.Summary.Gains
		surge, unavailable := maxSurge(ds, desired), maxUnavailable(ds, desired)
		r.Batch = unavailable
		how := fmt.Sprintf("maxUnavailable %d: deletes up to %s at a time and creates the new ones in their place", unavailable, pods(unavailable, "old"))
		if surge > 0 {
			r.Batch = surge
			how = fmt.Sprintf("maxSurge %d: starts up to %s next to the old ones, deleting each old pod once its replacement is available", surge, pods(surge, "new"))
		}
		if replaced > 0 {
			r.Waves = (replaced + r.Batch - 1) / r.Batch
			r.Estimate = time.Duration(r.Waves) * wave
		}
		r.Summary = fmt.Sprintf("RollingUpdate, %s, in no fixed order: %d nodes in %d waves", how, replaced, r.Waves)
		if stuck := stuckPods(p, surge > 0); replaced > 0 && stuck >= r.Batch {
			r.Stalls, r.Estimate = true, 0
			r.Summary += fmt.Sprintf("; it stalls: %s cannot be scheduled and the update may have only %d %s at a time, so it stops once it has reached %d of them; the nodes it has not reached keep the old revision",
				pods(stuck, "new"), r.Batch, map[bool]string{false: "unavailable", true: "surging"}[surge > 0], r.Batch)
		}
	}
	if !p.NewRevision {
		r.Summary = "no new revision: no pod is replaced"
	}
	return r
}

// stuckPods counts the new pods that cannot be scheduled and hold the rolling update's budget:
// every one without surge, those replacing an old pod with surge.
func stuckPods(p Impact, surge bool) int {
	n := 0
	for _, np := range p.Nodes {
		if np.Fit != nil && !np.Fit.Schedulable && (np.Change == Replaced || !surge) {
			n++
		}
	}
	return n
}

// maxSurge and maxUnavailable are the rolling update's budgets as node counts, resolved as the
// DaemonSet controller does (updatedDesiredNodeCounts): percents of the desired nodes rounded
// up, maxUnavailable 1 when both are zero, and 1 / 0 when unset as the API server defaults them.
func maxSurge(ds *appsv1.DaemonSet, desired int) int {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxSurge == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxSurge, desired, true)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

func maxUnavailable(ds *appsv1.DaemonSet, desired int) int {
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	v := intstr.FromInt32(1)
	if ru != nil && ru.MaxUnavailable != nil {
		v = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&v, desired, true)
	if err != nil || n < 0 {
		n = 0
	}
	if n == 0 && maxSurge(ds, desired) == 0 {
		n = 1
	}
	return n
}

// pods counts pods for people: "1 old pod", "2 new pods".
func pods(n int, kind string) string {
	if n == 1 {
		return "1 " + kind + " pod"
	}
	return fmt.Sprintf("%d %s pods", n, kind)
}
