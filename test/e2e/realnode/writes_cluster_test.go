package realnode

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// seqAnnotation numbers a DaemonSet's admitted template updates, so that after the load the test
// can tell that every admitted write is stored and nothing else is.
const seqAnnotation = "e2e.daemonguard.io/seq"

// What a write got. Compliant writes must come back admitted and injected; violating writes
// (a budget the rolling_update_budget policy forbids) must be denied naming the policy.
const (
	admittedInjected    = "admitted with injection"
	admittedNotInjected = "admitted WITHOUT injection"
	deniedByPolicy      = "denied by [rolling_update_budget]"
	admittedViolating   = "violating write ADMITTED"
	failedWebhookCall   = "rejected: failed calling webhook"
	failedOther         = "failed"
)

// writeLoad sends real DaemonSet writes (not dry-runs) through kube-apiserver, and so through
// daemonguard's admission, from a few workers until stopped, and files every write under what it
// got: creates and template updates that must be injected, and updates to a forbidden budget
// that must be denied. Its DaemonSets select no node, so they start no pods.
type writeLoad struct {
	ns     string
	client kubernetes.Interface

	mu       sync.Mutex
	counts   map[string]int    // "create: admitted with injection" -> writes
	firstErr map[string]string // outcome -> the first error message that got it
	stored   map[string]int    // DaemonSet -> seq of its last admitted template update (0: the create)
	unsure   map[string]bool   // DaemonSets whose create failed: stored or not, either is possible

	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// startWrites starts the load in a namespace of its own and waits until writes flow.
func startWrites(t *testing.T, workers int) *writeLoad {
	t.Helper()
	ns := cluster.NewTestNamespace(t)
	// A client of its own, so the load never starves the test's own requests of rate-limiter tokens.
	cfg := rest.CopyConfig(cluster.RESTConfig)
	cfg.QPS, cfg.Burst = 1000, 1000
	cfg.Timeout = 30 * time.Second // a write with no answer is counted, not waited for forever
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := &writeLoad{ns: ns, client: client, counts: map[string]int{}, firstErr: map[string]string{},
		stored: map[string]int{}, unsure: map[string]bool{}, stop: make(chan struct{})}
	for w := range workers {
		l.wg.Go(func() { l.work(w) })
	}
	t.Cleanup(l.halt)
	l.waitAdmitted(t, 10, "writes flow")
	return l
}

func (l *writeLoad) work(worker int) {
	ctx := context.Background()
	// Each worker writes at most 10 times a second: a steady load that leaves the 2-core machine
	// room for the rest of the cluster.
	pace := time.NewTicker(100 * time.Millisecond)
	defer pace.Stop()
	wait := func() bool {
		select {
		case <-l.stop:
			return false
		case <-pace.C:
			return true
		}
	}
	for i := 0; ; i++ {
		name := fmt.Sprintf("w%d-%d", worker, i)
		if !wait() {
			return
		}
		ds, err := l.client.AppsV1().DaemonSets(l.ns).Create(ctx, inertDaemonSet(name), metav1.CreateOptions{})
		if !l.record("create", ds, err, false) {
			l.mu.Lock()
			l.unsure[name] = true
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		l.stored[name] = 0
		l.mu.Unlock()
		for seq := 1; seq <= 2; seq++ {
			if !wait() {
				return
			}
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%[1]q:"%[2]d"}},"spec":{"template":{"metadata":{"annotations":{%[1]q:"%[2]d"}}}}}`, seqAnnotation, seq)
			ds, err := l.client.AppsV1().DaemonSets(l.ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
			if l.record("update", ds, err, false) {
				l.mu.Lock()
				l.stored[name] = seq
				l.mu.Unlock()
			}
		}
		if !wait() {
			return
		}
		violating := `{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":"100%"}}}}`
		ds, err = l.client.AppsV1().DaemonSets(l.ns).Patch(ctx, name, types.MergePatchType, []byte(violating), metav1.PatchOptions{})
		l.record("violating update", ds, err, true)
	}
}

// record files one write under its outcome and reports whether the write was admitted.
func (l *writeLoad) record(kind string, ds *appsv1.DaemonSet, err error, violating bool) bool {
	var outcome string
	switch {
	case err == nil && violating:
		outcome = admittedViolating
	case err == nil && injected(ds):
		outcome = admittedInjected
	case err == nil:
		outcome = admittedNotInjected
	case violating && strings.Contains(err.Error(), "denied") && strings.Contains(err.Error(), "[rolling_update_budget]"):
		outcome = deniedByPolicy
	case strings.Contains(err.Error(), "failed calling webhook"):
		outcome = failedWebhookCall
	default:
		outcome = failedOther
	}
	key := kind + ": " + outcome
	l.mu.Lock()
	defer l.mu.Unlock()
	l.counts[key]++
	if err != nil && l.firstErr[key] == "" {
		l.firstErr[key] = err.Error()
	}
	return err == nil
}

func injected(ds *appsv1.DaemonSet) bool {
	spec := ds.Spec.Template.Spec
	return hasToleration(spec.Tolerations, "node-role.kubernetes.io/control-plane") && spec.PriorityClassName == "system-node-critical"
}

// admitted is the number of writes admitted so far, expected or not.
func (l *writeLoad) admitted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for key, c := range l.counts {
		if strings.HasSuffix(key, admittedInjected) || strings.HasSuffix(key, deniedByPolicy) {
			n += c
		}
	}
	return n
}

// waitAdmitted waits until n more writes got the answer they should (admitted and injected, or
// denied by the policy) than when it was called.
func (l *writeLoad) waitAdmitted(t *testing.T, n int, what string) {
	t.Helper()
	from := l.admitted()
	cluster.WaitFor(t, time.Minute, what, func(context.Context) (bool, string) {
		return l.admitted() >= from+n, l.summary()
	})
}

// summary lists every outcome with its count.
func (l *writeLoad) summary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	keys := make([]string, 0, len(l.counts))
	total := 0
	for k, c := range l.counts {
		keys = append(keys, k)
		total += c
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", l.counts[k], k)
	}
	return fmt.Sprintf("%d writes: %s", total, strings.Join(parts, ", "))
}

func (l *writeLoad) halt() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// finish lets a few more writes through (the API server must keep reaching the webhook after
// what happened during), stops the load, logs what every write got and fails the test for every
// write that got anything but the expected answer. Then it reads the namespace back: every
// admitted create is stored with its last admitted update and nothing else is, so no write was
// lost.
func (l *writeLoad) finish(t *testing.T, during string) {
	t.Helper()
	l.waitAdmitted(t, 10, "writes flow after "+during)
	l.halt()
	t.Logf("DaemonSet writes during %s: %s", during, l.summary())
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, c := range l.counts {
		if !strings.HasSuffix(key, admittedInjected) && !strings.HasSuffix(key, deniedByPolicy) {
			t.Errorf("%d writes during %s: %s; first: %s", c, during, key, l.firstErr[key])
		}
	}
	list, err := cluster.Client.AppsV1().DaemonSets(l.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, ds := range list.Items {
		found[ds.Name] = true
		want, admitted := l.stored[ds.Name]
		if !admitted {
			if !l.unsure[ds.Name] {
				t.Errorf("DaemonSet %s is stored but no write of it was made", ds.Name)
			}
			continue
		}
		got, _ := strconv.Atoi(ds.Annotations[seqAnnotation])
		if got != want {
			t.Errorf("DaemonSet %s is stored at update %d, but update %d was the last admitted", ds.Name, got, want)
		}
		if !injected(&ds) {
			t.Errorf("DaemonSet %s is stored without the injection", ds.Name)
		}
		if mu := ds.Spec.UpdateStrategy.RollingUpdate; mu != nil && mu.MaxUnavailable != nil && mu.MaxUnavailable.String() == "100%" {
			t.Errorf("DaemonSet %s is stored with the denied budget 100%%", ds.Name)
		}
	}
	for name := range l.stored {
		if !found[name] {
			t.Errorf("DaemonSet %s was admitted but is not stored: a lost write", name)
		}
	}
}
