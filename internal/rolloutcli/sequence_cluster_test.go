package rolloutcli_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"github.com/daemonguard/daemonguard/internal/rolloutapi"
	"github.com/daemonguard/daemonguard/internal/rolloutcli"
	"github.com/daemonguard/daemonguard/test/clustertest"
	"github.com/daemonguard/daemonguard/test/localcluster"
)

// recorder keeps every version of one DaemonSet its watch delivers, as `rollout status` sees them.
type recorder struct {
	mu   sync.Mutex
	seq  []rolloutcli.Snapshot
	stop context.CancelFunc
	done chan struct{}
}

func record(t *testing.T, ns, name string) *recorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{stop: cancel, done: make(chan struct{})}
	w, err := cluster.Client.AppsV1().DaemonSets(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		defer w.Stop()
		for e := range w.ResultChan() {
			ds, ok := e.Object.(*appsv1.DaemonSet)
			if !ok || (e.Type != watch.Added && e.Type != watch.Modified) {
				continue
			}
			hash := ""
			if rolloutapi.IsManaged(ds) {
				hash, _ = rolloutcli.FetchCurrentRevisionHash(ctx, cluster.Client, ds)
			}
			r.mu.Lock()
			r.seq = append(r.seq, rolloutcli.TrimSnapshot(ds, hash))
			r.mu.Unlock()
		}
	}()
	return r
}

// finish stops the recording, checks that no line of it contradicts itself, and with
// RECORD_STATUS=1 writes it to testdata/sequences/<name>.yaml.
func (r *recorder) finish(t *testing.T, name string) {
	t.Helper()
	r.stop()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, s := range r.seq {
		st := rolloutcli.Evaluate(s.DaemonSet, s.CurrentRevision)
		progress := rolloutcli.ProgressLine(st, 0)
		if bad := rolloutcli.Contradictions(st, st.Message, progress); len(bad) > 0 {
			t.Errorf("%s #%d: %v\n  %s\n  %s", name, i, bad, st.Message, progress)
		}
	}
	if os.Getenv("RECORD_STATUS") != "1" {
		return
	}
	data, err := yaml.Marshal(r.seq)
	if err != nil {
		t.Fatal(err)
	}
	header := ("# Recorded by TestRecordStatusSequences (RECORD_STATUS=1 go test -run TestRecordStatusSequences ./internal/rolloutcli/):\n# every version of the DaemonSet the watch of `rollout status` delivered, trimmed to what it reads.\n")
	if err := os.WriteFile(filepath.Join("testdata", "sequences", name+".yaml"), append([]byte(header), data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

func sequenceDS(name, strategy, image string, annotations map[string]string) string {
	a := ""
	for k, v := range annotations {
		a += fmt.Sprintf("    %s: %q\n", k, v)
	}
	if a != "" {
		a = "  annotations:\n" + a
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: %s
%sspec:
  updateStrategy: {type: %s}
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      containers: [{name: app, image: %q}]
`, name, a, strategy, name, name, image)
}

// applyAgent applies the DaemonSet agent, running nginx:1.7.9, in ns.
func applyAgent(t *testing.T, ns, strategy string, annotations map[string]string) {
	t.Helper()
	clustertest.Kubectl(t, cluster, sequenceDS("agent", strategy, "nginx:1.7.9", annotations), "apply", "-n", ns, "-f", "-")
}

// setAgentImage changes the image of agent: a new revision to roll out.
func setAgentImage(t *testing.T, ns, image string) {
	t.Helper()
	clustertest.Kubectl(t, cluster, "", "set", "image", "-n", ns, "ds/agent", "app="+image)
}

// resumeThroughPause rolls agent out to nginx:1.25.5, waits for the rollout to pause for reason,
// resumes it and waits for the rollout to complete.
func resumeThroughPause(t *testing.T, ns, reason string) {
	t.Helper()
	setAgentImage(t, ns, "nginx:1.25.5")
	waitCondition(t, ns, "agent", rolloutapi.ConditionPaused, reason)
	mustRun(t, "resume", "ds/agent", "-n", ns)
	waitCondition(t, ns, "agent", rolloutapi.ConditionComplete, "")
}

func waitCondition(t *testing.T, ns, name string, ct appsv1.DaemonSetConditionType, reason string) {
	t.Helper()
	clustertest.WaitDaemonSet(t, cluster, ns, name, 2*time.Minute, fmt.Sprintf("%s condition %s %s", name, ct, reason), func(ds *appsv1.DaemonSet) (bool, string) {
		for _, c := range ds.Status.Conditions {
			if c.Type == ct && c.Status == "True" && (reason == "" || c.Reason == reason) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", ds.Status.Conditions)
	})
}

// Real rollouts by daemonguard's rollout controller (and by the built-in DaemonSet controller),
// watched as `rollout status` watches them: no line of any version contradicts itself. With
// RECORD_STATUS=1 the versions are written to testdata/sequences, where
// TestStatusLinesOfRecordedSequences goldens the lines they print.
func TestRecordStatusSequences(t *testing.T) {
	localcluster.NeedCluster(t)
	startController(t)
	complete := func(ns, name string) { waitCondition(t, ns, name, rolloutapi.ConditionComplete, "") }

	t.Run("progressive", func(t *testing.T) {
		ns := cluster.NewTestNamespace(t)
		r := record(t, ns, "agent")
		applyAgent(t, ns, "OnDelete", map[string]string{
			rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged, rolloutapi.AnnotationSteps: "1,pause:3s,50%,pause,100%"})
		complete(ns, "agent")
		resumeThroughPause(t, ns, "PausedAtStep")
		r.finish(t, "progressive")
	})
	t.Run("paused-by-annotation", func(t *testing.T) {
		ns := cluster.NewTestNamespace(t)
		applyAgent(t, ns, "OnDelete", map[string]string{rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged})
		complete(ns, "agent")
		r := record(t, ns, "agent")
		mustRun(t, "pause", "ds/agent", "-n", ns)
		resumeThroughPause(t, ns, "PausedByAnnotation")
		r.finish(t, "paused-by-annotation")
	})
	t.Run("never-ready", func(t *testing.T) {
		ns := cluster.NewTestNamespace(t)
		applyAgent(t, ns, "OnDelete", map[string]string{
			rolloutapi.AnnotationRollout: rolloutapi.RolloutManaged, rolloutapi.AnnotationProgressDeadline: "5s", rolloutapi.AnnotationMaxUnavailable: "2"})
		complete(ns, "agent")
		r := record(t, ns, "agent")
		setAgentImage(t, ns, "nginx:never-ready")
		waitCondition(t, ns, "agent", rolloutapi.ConditionFailed, rolloutapi.ReasonProgressDeadline)
		mustRun(t, "undo", "ds/agent", "-n", ns)
		complete(ns, "agent")
		r.finish(t, "never-ready")
	})
	t.Run("unmanaged-on-delete", func(t *testing.T) {
		ns := cluster.NewTestNamespace(t)
		r := record(t, ns, "agent")
		applyAgent(t, ns, "OnDelete", nil)
		clustertest.WaitDaemonSet(t, cluster, ns, "agent", time.Minute, "pods available", func(ds *appsv1.DaemonSet) (bool, string) {
			s := ds.Status
			return s.DesiredNumberScheduled > 0 && s.NumberAvailable == s.DesiredNumberScheduled, fmt.Sprintf("%+v", s)
		})
		setAgentImage(t, ns, "nginx:1.25.5")
		clustertest.WaitDaemonSet(t, cluster, ns, "agent", time.Minute, "new template observed", func(ds *appsv1.DaemonSet) (bool, string) {
			return ds.Status.ObservedGeneration == ds.Generation, fmt.Sprintf("%+v", ds.Status)
		})
		r.finish(t, "unmanaged-on-delete")
	})
	t.Run("rolling-update", func(t *testing.T) {
		ns := cluster.NewTestNamespace(t)
		r := record(t, ns, "agent")
		applyAgent(t, ns, "RollingUpdate", nil)
		mustRun(t, "status", "ds/agent", "-n", ns, "--timeout=2m")
		setAgentImage(t, ns, "nginx:1.25.5")
		mustRun(t, "status", "ds/agent", "-n", ns, "--timeout=2m")
		r.finish(t, "rolling-update")
	})
}
