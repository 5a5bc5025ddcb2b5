package rolloutbench

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/daemonguard/daemonguard/test/clustertest"
)

// podTimes is when the benchmark's informer first saw each step of one pod's life.
type podTimes struct {
	image, node                       string
	created, bound, ready, deleting   time.Time
	gone                              time.Time
	deletionRequestedBeforeFirstSight bool
}

// timeline records pod events of one namespace as they arrive, to split a rollout's wall time into
// the steps of the replacement chain: who the rollout waits for.
type timeline struct {
	mu   sync.Mutex
	pods map[string]*podTimes
	stop chan struct{}
}

func startTimeline(c kubernetes.Interface, ns string) (*timeline, error) {
	tl := &timeline{pods: map[string]*podTimes{}, stop: make(chan struct{})}
	inf := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns)).Core().V1().Pods().Informer()
	seen := func(obj any, gone bool) {
		now := time.Now()
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		tl.mu.Lock()
		defer tl.mu.Unlock()
		pt := tl.pods[p.Name]
		if pt == nil {
			pt = &podTimes{image: p.Spec.Containers[0].Image, created: now, deletionRequestedBeforeFirstSight: p.DeletionTimestamp != nil}
			tl.pods[p.Name] = pt
		}
		if pt.bound.IsZero() && p.Spec.NodeName != "" {
			pt.bound, pt.node = now, p.Spec.NodeName
		}
		if pt.ready.IsZero() && clustertest.PodReady(p) {
			pt.ready = now
		}
		if pt.deleting.IsZero() && p.DeletionTimestamp != nil {
			pt.deleting = now
		}
		if gone {
			pt.gone = now
			if pt.deleting.IsZero() {
				pt.deleting = now
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { seen(o, false) },
		UpdateFunc: func(_, o any) { seen(o, false) },
		DeleteFunc: func(o any) { seen(o, true) },
	}); err != nil {
		return nil, err
	}
	go inf.Run(tl.stop)
	if !cache.WaitForCacheSync(tl.stop, inf.HasSynced) {
		return nil, fmt.Errorf("pod informer of %s did not sync", ns)
	}
	// Pods listed at start were not seen being created: forget their creation time.
	tl.mu.Lock()
	for _, pt := range tl.pods {
		pt.created, pt.bound, pt.ready = time.Time{}, time.Time{}, time.Time{}
	}
	tl.mu.Unlock()
	return tl, nil
}

// phases is the replacement chain of one rollout, per node, as distributions.
type phases struct {
	// firstDelete: from `kubectl set image` to the first old pod's deletion.
	firstDelete time.Duration
	// terminate: old pod deletion requested -> old pod gone (kwok's kubelet).
	terminate []time.Duration
	// recreate: old pod gone -> new pod created (the built-in DaemonSet controller).
	recreate []time.Duration
	// schedule: new pod created -> bound (the scheduler).
	schedule []time.Duration
	// start: new pod bound -> Ready (kwok's kubelet, including the configured readiness delay).
	start []time.Duration
	// react: a new pod Ready -> the deletion that its availability made room for (the rollout
	// controller: the built-in one or daemonguard). The k-th deletion past the budget is paired
	// with the (k-budget)-th pod to turn Ready.
	react []time.Duration
	// tail: the last new pod Ready -> the benchmark saw the rollout done.
	tail time.Duration
}

// chain is one node's replacement: its old pod and the new one.
type chain struct{ old, new *podTimes }

// chains pairs, per node, the old pod (oldImage) with the new one (newImage): the nodes whose old
// pod the benchmark saw deleted and whose new pod it saw created. The caller holds tl.mu.
func (tl *timeline) chains(oldImage, newImage string) []chain {
	perNode := map[string]*chain{}
	for _, pt := range tl.pods {
		if pt.node == "" && pt.image == oldImage {
			continue
		}
		c := perNode[pt.node]
		if c == nil {
			c = &chain{}
			perNode[pt.node] = c
		}
		switch pt.image {
		case oldImage:
			c.old = pt
		case newImage:
			c.new = pt
		}
	}
	var out []chain
	for _, c := range perNode {
		if c.old != nil && c.new != nil && !c.old.deleting.IsZero() && !c.new.created.IsZero() {
			out = append(out, *c)
		}
	}
	return out
}

// analyze pairs, per node, the old pod (oldImage) with the new one (newImage).
func (tl *timeline) analyze(start, done time.Time, oldImage, newImage string, budget int) phases {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var ph phases
	var deletions, readies []time.Time
	for _, c := range tl.chains(oldImage, newImage) {
		deletions = append(deletions, c.old.deleting)
		if !c.old.gone.IsZero() {
			ph.terminate = append(ph.terminate, c.old.gone.Sub(c.old.deleting))
			ph.recreate = append(ph.recreate, c.new.created.Sub(c.old.gone))
		}
		if !c.new.bound.IsZero() {
			ph.schedule = append(ph.schedule, c.new.bound.Sub(c.new.created))
			if !c.new.ready.IsZero() {
				ph.start = append(ph.start, c.new.ready.Sub(c.new.bound))
			}
		}
		if !c.new.ready.IsZero() {
			readies = append(readies, c.new.ready)
		}
	}
	sortTimes(deletions)
	sortTimes(readies)
	if len(deletions) > 0 {
		ph.firstDelete = deletions[0].Sub(start)
	}
	for k := budget; k < len(deletions) && k-budget < len(readies); k++ {
		ph.react = append(ph.react, deletions[k].Sub(readies[k-budget]))
	}
	if len(readies) > 0 {
		ph.tail = done.Sub(readies[len(readies)-1])
	}
	return ph
}

// wave is one wave of a rollout that replaces budget nodes at a time and waits for each wave to
// pass before it deletes the next (a rollout with analysis gates).
type wave struct {
	firstDelete time.Time // the first of its old pods' deletions
	lastReady   time.Time // the last of its new pods turning Ready; zero if one never did
}

// waves splits the rollout into waves of budget nodes in the order their old pods were deleted:
// a gated rollout deletes a wave's pods together, and the next wave's only after the wave passed.
func (tl *timeline) waves(oldImage, newImage string, budget int) []wave {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	cs := tl.chains(oldImage, newImage)
	sort.Slice(cs, func(i, j int) bool { return cs[i].old.deleting.Before(cs[j].old.deleting) })
	var out []wave
	for i := 0; i < len(cs); i += budget {
		w := wave{firstDelete: cs[i].old.deleting}
		for _, c := range cs[i:min(i+budget, len(cs))] {
			if c.new.ready.IsZero() {
				w.lastReady = time.Time{}
				break
			}
			if c.new.ready.After(w.lastReady) {
				w.lastReady = c.new.ready
			}
		}
		out = append(out, w)
	}
	return out
}

func sortTimes(ts []time.Time) { sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) }) }

// quantile is the nearest-rank q-quantile; zero for no samples.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// table renders the phases of several rollouts side by side: median and 90th percentile per step.
func phaseTable(names []string, all []phases) string {
	var b strings.Builder
	b.WriteString(tableHeader("step (median / p90)", names))
	row := func(label string, get func(phases) []time.Duration) {
		fmt.Fprintf(&b, "%-44s", label)
		for _, ph := range all {
			d := get(ph)
			fmt.Fprintf(&b, " %22s", fmt.Sprintf("%s / %s (n=%d)", ms(quantile(d, 0.5)), ms(quantile(d, 0.9)), len(d)))
		}
		b.WriteString("\n")
	}
	one := func(label string, get func(phases) time.Duration) {
		fmt.Fprintf(&b, "%-44s", label)
		for _, ph := range all {
			fmt.Fprintf(&b, " %22s", ms(get(ph)))
		}
		b.WriteString("\n")
	}
	one("set image -> first deletion", func(p phases) time.Duration { return p.firstDelete })
	row("deletion -> old pod gone (kwok)", func(p phases) []time.Duration { return p.terminate })
	row("old pod gone -> new pod (DaemonSet ctrl)", func(p phases) []time.Duration { return p.recreate })
	row("new pod -> bound (scheduler)", func(p phases) []time.Duration { return p.schedule })
	row("bound -> Ready (kwok, incl. delay)", func(p phases) []time.Duration { return p.start })
	row("Ready -> next deletion (rollout ctrl)", func(p phases) []time.Duration { return p.react })
	one("last Ready -> rollout seen done", func(p phases) time.Duration { return p.tail })
	return b.String()
}

// tableHeader is the first line of a table with one column per rollout.
func tableHeader(title string, names []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-44s", title)
	for _, n := range names {
		fmt.Fprintf(&b, " %22s", n)
	}
	return b.String() + "\n"
}

func ms(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }
