package apibench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/daemonguard/daemonguard/test/harness"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// Config says what a run measures.
type Config struct {
	Rates    []int         // writes/s, creates and updates together
	Duration time.Duration // of each step
	Progress io.Writer     // progress lines for a person; nil discards them
}

// Run starts a local control plane and measures every rate three times, one setup after the
// other: without webhooks, with a null webhook registered as daemonguard's webhooks are, and with
// daemonguard's webhooks (the webhook server in this process, called over TLS on loopback, as the
// demo and the integration tests run it). Every step writes into a namespace of its own, deleted
// (and waited for) before the next step starts, so no step pays for the objects of another.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if len(cfg.Rates) == 0 || cfg.Duration <= 0 {
		return nil, fmt.Errorf("apibench: no rates or no duration")
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	// The null webhook's server logs through controller-runtime's global logger, which the
	// harness points at the webhook's log file when daemonguard's setup starts.
	ctrl.SetLogger(logr.Discard())
	c, err := localcluster.Start(ctx, localcluster.Config{Log: progress})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	restCfg := rest.CopyConfig(c.RESTConfig)
	// The open loop, not client-go's rate limiter, sets the pace.
	restCfg.QPS, restCfg.Burst = -1, 0
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return nil, err
	}
	rep := &Report{Rates: cfg.Rates, Duration: cfg.Duration, Nodes: len(localcluster.DefaultNodes())}
	for _, rate := range cfg.Rates {
		for _, setup := range []string{NoDaemonguard, NullWebhook, Daemonguard} {
			stop := func() error { return nil }
			switch setup {
			case NullWebhook:
				if stop, err = startNullWebhook(ctx, c, client); err != nil {
					return nil, err
				}
			case Daemonguard:
				w, err := harness.StartWebhook(ctx, c, harness.Options{})
				if err != nil {
					return nil, err
				}
				stop = func() error { w.Stop(); return nil }
			}
			ns := fmt.Sprintf("apibench-%s-%d", setup, rate)
			if err := c.CreateNamespace(ctx, ns); err != nil {
				return nil, err
			}
			fmt.Fprintf(progress, "%s: %d writes/s for %v\n", setup, rate, cfg.Duration)
			// Unmeasured: informers and connections start on first use, in the API server and
			// in the webhook alike.
			if _, err := runStep(ctx, client, ns, setup+"-warmup", min(rate, 50), time.Second); err != nil {
				return nil, err
			}
			steps, err := runStep(ctx, client, ns, setup, rate, cfg.Duration)
			if err != nil {
				return nil, err
			}
			rep.Steps = append(rep.Steps, steps...)
			if err := stop(); err != nil {
				return nil, err
			}
			if err := deleteNamespace(ctx, client, ns); err != nil {
				return nil, err
			}
		}
	}
	return rep, nil
}

// deleteNamespace deletes ns and waits until it and its DaemonSets are gone.
func deleteNamespace(ctx context.Context, client kubernetes.Interface, ns string) error {
	if err := client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("delete namespace %s: %w", ns, err)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("wait for namespace %s to go: %w", ns, err)
	}
	return nil
}

// runStep pre-creates the DaemonSets the step will update (not measured), then sends rate writes
// per second for d, open loop: each write starts at its scheduled time whether or not earlier
// ones have returned, alternately a CREATE of a new DaemonSet and an UPDATE (new image) of a
// pre-created one (a patch). Latency counts from the scheduled time.
func runStep(ctx context.Context, client kubernetes.Interface, namespace, setup string, rate int, d time.Duration) ([]Step, error) {
	total := int(d.Seconds() * float64(rate))
	prefix := fmt.Sprintf("%s-%d", setup, rate)
	stored, err := preCreate(ctx, client, namespace, prefix+"-u", total/2)
	if err != nil {
		return nil, err
	}
	before, err := scrape(ctx, client)
	if err != nil {
		return nil, err
	}
	type result struct {
		latency time.Duration
		err     error
	}
	results := make([]result, total)
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(at))
		wg.Go(func() {
			var err error
			if i%2 == 0 {
				_, err = client.AppsV1().DaemonSets(namespace).Create(ctx, agent(fmt.Sprintf("%s-c%d", prefix, i/2)), metav1.CreateOptions{})
			} else {
				// A patch, as kubectl set image sends: the DaemonSet controller writes the
				// status meanwhile, so an update with the stored resourceVersion would conflict.
				_, err = client.AppsV1().DaemonSets(namespace).Patch(ctx, stored[i/2], types.StrategicMergePatchType, newImage, metav1.PatchOptions{})
			}
			results[i] = result{latency: time.Since(at), err: err}
		})
	}
	wg.Wait()
	after, err := scrape(ctx, client)
	if err != nil {
		return nil, err
	}
	var steps []Step
	for parity, op := range []string{"CREATE", "UPDATE"} {
		s := Step{Setup: setup, Rate: rate, Operation: op, Webhooks: webhookLatencies(before, after, op)}
		var latencies []time.Duration
		for i := parity; i < total; i += 2 {
			s.Sent++
			if err := results[i].err; err != nil {
				s.Errors++
				if s.FirstErr == "" {
					s.FirstErr = err.Error()
				}
				continue
			}
			latencies = append(latencies, results[i].latency)
		}
		s.summarise(latencies)
		steps = append(steps, s)
	}
	return steps, nil
}

// newImage is the update of every UPDATE the benchmark sends.
var newImage = []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"agent","image":"registry.example/agent:2"}]}}}}`)

// preCreate creates n DaemonSets named prefix-N with a few writers in parallel and returns their
// names.
func preCreate(ctx context.Context, client kubernetes.Interface, namespace, prefix string, n int) ([]string, error) {
	out := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	const writers = 16
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				out[i] = fmt.Sprintf("%s%d", prefix, i)
				_, errs[i] = client.AppsV1().DaemonSets(namespace).Create(ctx, agent(out[i]), metav1.CreateOptions{})
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("pre-create DaemonSets: %w", err)
		}
	}
	return out, nil
}

// agent is the seed DaemonSet's shape (a node agent tolerating only the legacy master taint, so
// daemonguard injects on CREATE), selecting no node: the writes measure admission and storage,
// not the DaemonSet controller creating pods.
func agent(name string) *appsv1.DaemonSet {
	labels := map[string]string{"app": name}
	maxUnavailable := intstr.FromInt32(1)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &maxUnavailable}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"apibench.daemonguard.io/no-such-node": "true"},
					Tolerations:  []corev1.Toleration{{Key: "node-role.kubernetes.io/master", Effect: corev1.TaintEffectNoSchedule}},
					Containers:   []corev1.Container{{Name: "agent", Image: "registry.example/agent:1"}},
				},
			},
		},
	}
}

// scrape reads the API server's webhook duration histograms.
func scrape(ctx context.Context, client kubernetes.Interface) (map[webhookKey]histogram, error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read API server metrics: %w", err)
	}
	return parseWebhookDurations(bytes.NewReader(raw))
}
