package rolloutplan

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
)

// TestRememberedClassesPlanAsFreshOnes holds a scratch's remembered node classes to plans made
// afresh: over random writes to pods and nodes, the controller's deletions and the clock moving
// by a moment, across a pod's minimum readiness, across the time a termination counts as stuck,
// or back a second, the target revision and the minimum readiness changing, a memo's plans and analysis requests (whose scratch remembers) equal those
// of StateOf over the same objects, listed in another order, with no scratch.
func TestRememberedClassesPlanAsFreshOnes(t *testing.T) {
	settings, err := rolloutapi.ParseSettings(map[string]string{rolloutapi.AnnotationMaxUnavailable: "2",
		rolloutapi.AnnotationAnalysis: `- {name: errors, query: 'x{node=~"{{ nodes }}"}', max: 0.1, interval: 20s, count: 1}`})
	if err != nil {
		t.Fatal(err)
	}
	moves := []time.Duration{0, time.Second, 2 * time.Second, 5 * time.Second, 9 * time.Second, 40 * time.Second,
		3 * time.Minute, stuckTerminatingAfter + time.Second, -time.Second}
	reused, reclassified := 0, 0
	for seed := range uint64(60) {
		c := newMemoCluster(seed, 10)
		c.ds.Spec.MinReadySeconds = []int32{0, 7, 45}[seed%3]
		var m Memo
		var status rolloutapi.Status
		now, target := t0, newRev
		for step := range 100 {
			var done []string
			for range c.rng.IntN(3) {
				done = append(done, c.change(now))
			}
			switch c.rng.IntN(20) {
			case 0:
				c.ds = c.ds.DeepCopy()
				c.ds.Spec.MinReadySeconds = []int32{0, 7, 45}[c.rng.IntN(3)]
				done = append(done, "minReadySeconds changed")
			case 1:
				target = map[string]string{newRev: oldRev, oldRev: newRev}[target]
				done = append(done, "the target revision changed")
			}
			move := moves[c.rng.IntN(len(moves))]
			now = now.Add(move)
			o := c.observed(now)
			o.Settings, o.Status, o.TargetRevision = settings, status, target
			o.Settings.TopologyKey = c.topo
			at := fmt.Sprintf("seed %d, step %d, the clock moved %s after %v", seed, step, move, done)
			before := classesOf(&m.scratch)
			listed := c.observed(now)
			listed.Settings, listed.Status, listed.TargetRevision = o.Settings, o.Status, target
			fresh := StateOf(listed)
			if got, want := m.DueAnalysis(o), DueAnalysis(fresh); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: DueAnalysis differs:\n got %+v\nwant %+v", at, got, want)
			}
			got, want := m.Compute(o), Compute(fresh)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: Compute differs:\n got %+v\nwant %+v", at, got, want)
			}
			for pods, from := range classesOf(&m.scratch) {
				if was, ok := before[pods]; ok && was == from {
					reused++
				} else {
					reclassified++
				}
			}
			status = got.Status
			c.replace(got.Delete, now)
		}
	}
	t.Logf("%d classes taken again, %d made anew", reused, reclassified)
	// Most classes are taken again, and many made anew: the test tests both.
	if reused < 2*reclassified || reclassified < 1000 {
		t.Errorf("%d classes taken again, %d made anew: the test does not test the remembering", reused, reclassified)
	}
}

// classesOf are the classes a scratch remembers, by their Pods array, each as its from time (a
// class made anew has the Now of the plan that made it).
func classesOf(s *scratch) map[*PodState]time.Time {
	out := map[*PodState]time.Time{}
	for _, c := range s.classes {
		if c.pods != nil {
			out[c.pods] = c.from
		}
	}
	return out
}
